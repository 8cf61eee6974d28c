package nccl

import "fmt"

// NCCL's ABI as this package uses it. NCCL has no package to compile
// against where gdist is built and tested, so, unlike the CUDA runtime's
// (checked against the real headers by gpu/cuda's TestRealHeaders), these
// facts are kept in this one table, each with the line of NCCL's
// src/nccl.h.in it comes from (NVIDIA/nccl; the values have been stable
// since NCCL 2.10, when ncclAvg and ncclBfloat16 came). shim.h, ops.go,
// lib.go and the fake (gpu/cudafake) take their values from here, and
// TestABITable checks that they do.
const (
	// ncclUniqueId: "#define NCCL_UNIQUE_ID_BYTES 128" and
	// "typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;"
	// (passed by value to ncclCommInitRank).
	uniqueIDBytes = 128

	// ncclResult_t: "typedef enum { ncclSuccess =  0, ... ncclInProgress =  7,".
	ncclSuccess            = 0
	ncclUnhandledCudaError = 1
	ncclSystemError        = 2
	ncclInternalError      = 3
	ncclInvalidArgument    = 4
	ncclInvalidUsage       = 5
	ncclRemoteError        = 6 // NCCL 2.12+
	ncclInProgress         = 7 // NCCL 2.14+, non-blocking communicators only
)

// abiFact is one value of the table, with its header line.
type abiFact struct {
	name  string
	value int
	line  string // the line of src/nccl.h.in
}

// abiTable lists every NCCL enum value the package passes or reads.
var abiTable = []abiFact{
	{"NCCL_UNIQUE_ID_BYTES", uniqueIDBytes, "#define NCCL_UNIQUE_ID_BYTES 128"},
	{"ncclSuccess", ncclSuccess, "typedef enum { ncclSuccess                 =  0,"},
	{"ncclUnhandledCudaError", ncclUnhandledCudaError, "ncclUnhandledCudaError      =  1,"},
	{"ncclSystemError", ncclSystemError, "ncclSystemError             =  2,"},
	{"ncclInternalError", ncclInternalError, "ncclInternalError           =  3,"},
	{"ncclInvalidArgument", ncclInvalidArgument, "ncclInvalidArgument         =  4,"},
	{"ncclInvalidUsage", ncclInvalidUsage, "ncclInvalidUsage            =  5,"},
	{"ncclRemoteError", ncclRemoteError, "ncclRemoteError             =  6,"},
	{"ncclInProgress", ncclInProgress, "ncclInProgress              =  7,"},
	{"ncclInt8", 0, "typedef enum { ncclInt8       = 0, ncclChar       = 0,"},
	{"ncclUint8", 1, "ncclUint8      = 1,"},
	{"ncclInt32", 2, "ncclInt32      = 2, ncclInt        = 2,"},
	{"ncclUint32", 3, "ncclUint32     = 3,"},
	{"ncclInt64", 4, "ncclInt64      = 4,"},
	{"ncclUint64", 5, "ncclUint64     = 5,"},
	{"ncclFloat16", 6, "ncclFloat16    = 6, ncclHalf       = 6,"},
	{"ncclFloat32", 7, "ncclFloat32    = 7, ncclFloat      = 7,"},
	{"ncclFloat64", 8, "ncclFloat64    = 8, ncclDouble     = 8,"},
	{"ncclBfloat16", 9, "ncclBfloat16   = 9,"},
	{"ncclSum", 0, "typedef enum { ncclSum        = 0,"},
	{"ncclProd", 1, "ncclProd       = 1,"},
	{"ncclMax", 2, "ncclMax        = 2,"},
	{"ncclMin", 3, "ncclMin        = 3,"},
	{"ncclAvg", 4, "ncclAvg        = 4,"},
}

// abiValue is the table's value of name; it panics on a name not in it.
func abiValue(name string) int {
	for _, f := range abiTable {
		if f.name == name {
			return f.value
		}
	}
	panic("nccl: no ABI fact " + name)
}

// parseVersion splits ncclGetVersion's code. nccl.h.in:
// "#define NCCL_VERSION(X,Y,Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))":
// up to 2.8 the code is X*1000+Y*100+Z, from 2.9 on X*10000+Y*100+Z (so a
// code of 10000 or more is the new encoding).
func parseVersion(v int) (major, minor, patch int) {
	if v >= 10000 {
		return v / 10000, v % 10000 / 100, v % 100
	}
	return v / 1000, v % 1000 / 100, v % 100
}

func versionString(v int) string {
	a, b, c := parseVersion(v)
	return fmt.Sprintf("%d.%d.%d", a, b, c)
}
