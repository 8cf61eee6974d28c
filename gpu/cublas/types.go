package cublas

import (
	"fmt"

	"github.com/gdist/gdist/internal/dl"
)

// EnvLibrary names the environment variable that points the loader at a
// specific cuBLAS library (a path or a file name for dlopen). When it is
// set, nothing else is tried.
const EnvLibrary = "GDIST_CUBLAS_PATH"

// DefaultLibraries are the names tried, in order, when EnvLibrary is unset,
// after the libraries of NVIDIA's pip wheels (see WheelLibraries).
var DefaultLibraries = []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11"}

// WheelLibraries are the cuBLAS libraries that NVIDIA's pip wheels
// installed in the Python environments (dl.WheelLibraries: $VIRTUAL_ENV,
// $CONDA_PREFIX, then the environment of each python3 on $PATH): CUDA 13's
// nvidia/cu13/lib/libcublas.so.13 and CUDA 12's
// nvidia/cublas/lib/libcublas.so.12. PyTorch's wheels bring them.
func WheelLibraries() []string {
	return dl.WheelLibraries("nvidia/cu13/lib/libcublas.so.13", "nvidia/cublas/lib/libcublas.so.12")
}

// Op is a cublasOperation_t: whether a matrix is used as stored or
// transposed.
type Op int

// The cublasOperation_t values used.
const (
	NoTrans Op = 0 // CUBLAS_OP_N
	Trans   Op = 1 // CUBLAS_OP_T
)

func (o Op) String() string {
	switch o {
	case NoTrans:
		return "N"
	case Trans:
		return "T"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Math is a cublasMath_t: whether fp32 products may use TF32 tensor cores.
type Math int

// The cublasMath_t values used.
const (
	// DefaultMath computes fp32 products in fp32: PyTorch's default
	// (torch.backends.cuda.matmul.allow_tf32 = False,
	// torch.set_float32_matmul_precision("highest")).
	DefaultMath Math = 0
	// PedanticMath forbids every shortcut (CUBLAS_PEDANTIC_MATH).
	PedanticMath Math = 2
	// TF32 lets fp32 products round their inputs to TF32 (10 bits of
	// mantissa) on tensor cores (CUBLAS_TF32_TENSOR_OP_MATH): PyTorch's
	// allow_tf32 = True, set_float32_matmul_precision("high").
	TF32 Math = 3
)

func (m Math) String() string {
	switch m {
	case DefaultMath:
		return "default"
	case PedanticMath:
		return "pedantic"
	case TF32:
		return "tf32"
	}
	return fmt.Sprintf("Math(%d)", int(m))
}

// Float32MatmulPrecision maps PyTorch's torch.set_float32_matmul_precision
// argument to a math mode: "highest" is DefaultMath, "high" and "medium"
// are TF32 (for fp32 GEMMs cuBLAS has nothing between: PyTorch's "medium"
// also allows bf16 internally, which cuBLAS's TF32 mode does not).
func Float32MatmulPrecision(p string) (Math, error) {
	switch p {
	case "highest":
		return DefaultMath, nil
	case "high", "medium":
		return TF32, nil
	}
	return 0, fmt.Errorf("cublas: float32 matmul precision %q: want highest, high or medium (PyTorch's names)", p)
}

// DataType is a cudaDataType: the element type of a matrix in GemmEx.
type DataType int

// The cudaDataType values used.
const (
	F32  DataType = 0  // CUDA_R_32F
	F16  DataType = 2  // CUDA_R_16F
	BF16 DataType = 14 // CUDA_R_16BF
)

// Size is the size of one element in bytes.
func (t DataType) Size() int {
	switch t {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}

// ComputeType is a cublasComputeType_t: how GemmEx multiplies and sums.
type ComputeType int

// The cublasComputeType_t values used; all accumulate in fp32.
const (
	Compute32F         ComputeType = 68 // CUBLAS_COMPUTE_32F
	Compute32FPedantic ComputeType = 69 // CUBLAS_COMPUTE_32F_PEDANTIC
	Compute32FFast16F  ComputeType = 74 // inputs may be rounded to fp16
	Compute32FFast16BF ComputeType = 75 // inputs may be rounded to bf16
	Compute32FFastTF32 ComputeType = 77 // inputs may be rounded to TF32
)

// The cublasStatus_t values an Error may carry (others are shown by name).
const (
	StatusSuccess         = 0  // CUBLAS_STATUS_SUCCESS
	StatusNotInitialized  = 1  // CUBLAS_STATUS_NOT_INITIALIZED
	StatusAllocFailed     = 3  // CUBLAS_STATUS_ALLOC_FAILED
	StatusInvalidValue    = 7  // CUBLAS_STATUS_INVALID_VALUE
	StatusArchMismatch    = 8  // CUBLAS_STATUS_ARCH_MISMATCH
	StatusExecutionFailed = 13 // CUBLAS_STATUS_EXECUTION_FAILED
	StatusNotSupported    = 15 // CUBLAS_STATUS_NOT_SUPPORTED
)

// Matrix is one operand of GemmEx: a column-major matrix at device address
// Ptr, of element type Type, with leading dimension LD (elements between
// the starts of two columns).
type Matrix struct {
	Ptr  uintptr
	Type DataType
	LD   int
}

// Error is a failed cuBLAS call: which call, its cublasStatus_t and what
// it means.
type Error struct {
	Call   string // e.g. "cublasSgemm"
	Status int    // the cublasStatus_t value (StatusInvalidValue, ...)
	Name   string // e.g. "CUBLAS_STATUS_INVALID_VALUE"
	Msg    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("cublas: %s: %s (%s, status %d)", e.Call, e.Msg, e.Name, e.Status)
}

var statusNames = map[int]string{
	0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
	7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

// checkInt32 says which of the sizes (name, value pairs) does not fit the
// int that cuBLAS takes.
func checkInt32(call string, kv ...any) error {
	for i := 0; i < len(kv); i += 2 {
		if v := kv[i+1].(int); v > 1<<31-1 || v < -1<<31 {
			return fmt.Errorf("cublas: %s: %s = %d is outside int32, cuBLAS's size type (split the product)", call, kv[i], v)
		}
	}
	return nil
}

func ld(v int) int { return max(1, v) }

// checkBatched checks the sizes of a strided batched product: every size
// within int32, strides of 0 or more, no two products' C matrices
// overlapping (cuBLAS does not check it: the result would be undefined).
func checkBatched(call string, m, n, k, lda, ldb, ldc int, sa, sb, sc int64, batch int) error {
	if err := checkInt32(call, "m", m, "n", n, "k", k, "lda", lda, "ldb", ldb, "ldc", ldc, "batch", batch); err != nil {
		return err
	}
	if sa < 0 || sb < 0 || sc < 0 {
		return fmt.Errorf("cublas: %s: negative strides (A %d, B %d, C %d)", call, sa, sb, sc)
	}
	if batch > 1 && m > 0 && n > 0 && sc < int64(n-1)*int64(ldc)+int64(m) {
		return fmt.Errorf("cublas: %s: the %d products' C matrices (%d x %d, ldc %d) overlap at stride %d", call, batch, m, n, ldc, sc)
	}
	return nil
}
