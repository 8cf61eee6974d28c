//go:build !amd64 || purego

package reduce

func archKernelSets() []*kernelSet { return nil }
