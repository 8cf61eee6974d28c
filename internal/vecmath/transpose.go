package vecmath

// Transpose sets dst[j*ldd+i] = src[i*lds+j] for i < rows, j < cols: the
// cols x rows transpose of a rows x cols matrix (leading dimensions lds
// and ldd). Whole 8 x 8 blocks go through AVX2 registers where the active
// set is avx2 or avx512; the edges, and everything elsewhere, a loop.
func Transpose(dst []float32, ldd int, src []float32, lds int, rows, cols int) {
	if rows <= 0 || cols <= 0 {
		return
	}
	_ = src[(rows-1)*lds+cols-1] // bounds, once
	_ = dst[(cols-1)*ldd+rows-1]
	r8, c8 := 0, 0
	if rowAsm && haveTransposeAsm {
		r8, c8 = rows&^7, cols&^7
		for i := 0; i < r8; i += 8 {
			for j := 0; j < c8; j += 8 {
				transpose8x8AVX(&dst[j*ldd+i], ldd, &src[i*lds+j], lds)
			}
		}
	}
	for i := 0; i < rows; i++ {
		j0 := 0
		if i < r8 {
			j0 = c8 // the blocks did the rest of this row
		}
		row := src[i*lds : i*lds+cols]
		for j := j0; j < cols; j++ {
			dst[j*ldd+i] = row[j]
		}
	}
}
