package cublas

// For the ABI check (realabi_test.go): the Go constants that must equal the
// real header's values.
var GoValues = map[string]int{
	"NoTrans": int(NoTrans), "Trans": int(Trans),
	"DefaultMath": int(DefaultMath), "PedanticMath": int(PedanticMath), "TF32": int(TF32),
	"F32": int(F32), "F16": int(F16), "BF16": int(BF16),
	"Compute32F": int(Compute32F), "Compute32FPedantic": int(Compute32FPedantic),
	"Compute32FFast16F": int(Compute32FFast16F), "Compute32FFast16BF": int(Compute32FFast16BF),
	"Compute32FFastTF32": int(Compute32FFastTF32),
	"StatusSuccess":      StatusSuccess, "StatusNotInitialized": StatusNotInitialized,
	"StatusAllocFailed": StatusAllocFailed, "StatusInvalidValue": StatusInvalidValue,
	"StatusArchMismatch": StatusArchMismatch, "StatusExecutionFailed": StatusExecutionFailed,
	"StatusNotSupported": StatusNotSupported,
}
