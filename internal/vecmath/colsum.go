package vecmath

// ColAddTo adds the rows of x (rows x len(out), row-major) to out in row
// order: out[j] += x[r*len(out)+j] for r = 0, 1, ... (each column's sum in
// the order of a loop of AddTo over the rows, bit for bit), with each
// column block's running sums in registers.
func ColAddTo(out, x []float32, rows int) {
	c := len(out)
	if rows <= 0 || c == 0 {
		return
	}
	_ = x[rows*c-1]
	n := 0
	if rowAsm {
		if n = c &^ 7; n > 0 {
			colAddAVX(rp(out), rp(x), nil, n, c, rows)
		}
	}
	if n < c {
		for r := 0; r < rows; r++ {
			addToGo(out[n:], x[r*c+n:r*c+c])
		}
	}
}

// ColAddMulTo adds the rows of x times those of y to out in row order:
// out[j] += x[r*c+j] y[r*c+j] (the product rounded, then the sum) for r =
// 0, 1, ..., c = len(out): a loop of AddMulTo over the rows, bit for bit.
func ColAddMulTo(out, x, y []float32, rows int) {
	c := len(out)
	if rows <= 0 || c == 0 {
		return
	}
	_, _ = x[rows*c-1], y[rows*c-1]
	n := 0
	if rowAsm {
		if n = c &^ 7; n > 0 {
			colAddAVX(rp(out), rp(x), rp(y), n, c, rows)
		}
	}
	if n < c {
		for r := 0; r < rows; r++ {
			addMulToGo(out[n:], x[r*c+n:r*c+c], y[r*c+n:r*c+c])
		}
	}
}
