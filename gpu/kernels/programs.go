package kernels

// The kernels of the layers' programs that Load looks up.
var (
	pointwiseKernels = []string{}
	rowsKernels      = []string{"gd_row_sum"}
)
