package hugepage

import "testing"

// TestFloat32s: zeroed, the length asked for, small and large, and usable
// (written and read back) across the advised range.
func TestFloat32s(t *testing.T) {
	for _, n := range []int{0, 1, 1000, MinBytes/4 - 1, MinBytes / 4, 3*MinBytes/4 + 5} {
		b := Float32s(n)
		if len(b) != n {
			t.Fatalf("len %d, want %d", len(b), n)
		}
		for i := range b {
			if b[i] != 0 {
				t.Fatalf("n %d: element %d is %v, not zero", n, i, b[i])
			}
			b[i] = float32(i)
		}
		for i := range b {
			if b[i] != float32(i) {
				t.Fatalf("n %d: element %d reads %v", n, i, b[i])
			}
		}
	}
}
