package devmodel

// SetNormCap sets the device log's capacity of the models placed next,
// and returns how to restore it.
func SetNormCap(n int) (restore func()) {
	old := normCap
	normCap = n
	return func() { normCap = old }
}
