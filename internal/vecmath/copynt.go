package vecmath

// CopyNT copies min(len(dst), len(src)) bytes from src to dst like copy,
// but writes dst with non-temporal (streaming) stores where the CPU has
// AVX2, and returns the count. It is for writing memory that another core
// has read since it was last written here: an ordinary store must first
// take each line back from that core's cache, which on this VM ran at
// 7.9 GB/s against 57 GB/s for streaming stores when the two vCPUs sit
// far apart (issue 30, benchmarks/NOTES.md); the reader then reads at
// 33 GB/s against 38. The stores are fenced before CopyNT returns, so a
// later atomic store (a counter the reader waits for) orders after them.
// dst and src must not overlap.
func CopyNT(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < 4096 || !copyNTOK {
		return copy(dst, src[:n])
	}
	// Align the destination to 64 bytes with an ordinary copy, stream
	// the 64-byte lines, copy the tail.
	head := 0
	if a := addrMod64(dst); a != 0 {
		head = 64 - a
		copy(dst[:head], src[:head])
	}
	body := (n - head) &^ 63
	copyNT(dst[head:head+body], src[head:head+body])
	copy(dst[head+body:n], src[head+body:n])
	return n
}
