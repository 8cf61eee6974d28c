package devmodel

// SetFuse switches the fusions across layers (fuse.go) for the plans
// compiled until restore is called: off, every layer runs on its own.
func SetFuse(on bool) (restore func()) {
	was := fuseLayers
	fuseLayers = on
	return func() { fuseLayers = was }
}
