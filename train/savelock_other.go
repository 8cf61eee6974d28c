//go:build !unix

package train

// lockSave: no file locks here; jobs must not share a -save path.
func lockSave(path string) (release func(), err error) { return func() {}, nil }
