//go:build !amd64 || purego

package vecmath

const copyNTOK = false

func addrMod64([]byte) int { return 0 }

func copyNT(dst, src []byte) { copy(dst, src) }
