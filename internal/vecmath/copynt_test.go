package vecmath

import (
	"bytes"
	"testing"
)

// TestCopyNT: every length and alignment around the streaming path's
// edges copies exactly what copy does and nothing past the end.
func TestCopyNT(t *testing.T) {
	src := make([]byte, 70000)
	for i := range src {
		src[i] = byte(i*7 + i>>8)
	}
	for _, n := range []int{0, 1, 63, 4095, 4096, 4097, 4160, 65536, 65536 + 13, 69000} {
		for _, off := range []int{0, 1, 31, 33, 63} {
			for _, soff := range []int{0, 5} {
				dst := make([]byte, n+off+64)
				for i := range dst {
					dst[i] = 0xAA
				}
				got := CopyNT(dst[off:off+n], src[soff:soff+n])
				if got != n || !bytes.Equal(dst[off:off+n], src[soff:soff+n]) {
					t.Fatalf("n %d dst offset %d src offset %d: copied %d, bytes differ", n, off, soff, got)
				}
				for i, b := range dst[off+n:] {
					if b != 0xAA {
						t.Fatalf("n %d dst offset %d: byte %d past the end written", n, off, i)
					}
				}
			}
		}
	}
	// Shorter source or destination: min of the two, as copy.
	dst := make([]byte, 5000)
	if got := CopyNT(dst, src[:4500]); got != 4500 || !bytes.Equal(dst[:4500], src[:4500]) {
		t.Fatalf("short source: copied %d", got)
	}
}

func ExampleCopyNT() {
	staging := make([]byte, 1<<16)
	grads := bytes.Repeat([]byte{1, 2, 3, 4}, 1<<14)
	n := CopyNT(staging, grads)
	_ = n // staging now holds grads; publish it to the peer after this
}
