//go:build !unix

package train

import "errors"

// lockSave: no file locks here; jobs must not share a -save path.
func lockSave(path string) (release func(), err error) { return func() {}, nil }

// diskFree: unknown here (the check is skipped).
func diskFree(dir string) (uint64, error) { return 0, errors.ErrUnsupported }
