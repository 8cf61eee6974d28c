//go:build !amd64 || purego

package algo

func archKernelSets() []*kernelSet { return nil }
