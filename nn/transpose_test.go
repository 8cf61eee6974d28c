package nn

import "testing"

// TestTransposeInto: every shape, blocked or not (edges of 1-7 rows or
// columns), against the definition.
func TestTransposeInto(t *testing.T) {
	for _, rows := range []int{1, 3, 8, 9, 16, 23, 64} {
		for _, cols := range []int{1, 7, 8, 10, 17, 64} {
			v := make([]float32, rows*cols)
			for i := range v {
				v[i] = float32(i + 1)
			}
			out := make([]float32, len(v))
			transposeInto(out, v, rows, cols)
			for i := range rows {
				for j := range cols {
					if out[j*rows+i] != v[i*cols+j] {
						t.Fatalf("%dx%d: out[%d][%d] = %v, want %v", rows, cols, j, i, out[j*rows+i], v[i*cols+j])
					}
				}
			}
		}
	}
}
