//go:build !amd64 || purego

package winograd

// archKernelSets: no assembly here; the go set runs.
func archKernelSets() []*kernelSet { return nil }
