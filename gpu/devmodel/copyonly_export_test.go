package devmodel

// SetCopyOnly switches the values kept as bf16 copies only (memory.go's
// keepCopiesOnly) for the plans compiled until restore is called: off,
// every fp32 value is kept beside its copy, in the region as before.
func SetCopyOnly(on bool) (restore func()) {
	was := copyOnlyValues
	copyOnlyValues = on
	return func() { copyOnlyValues = was }
}
