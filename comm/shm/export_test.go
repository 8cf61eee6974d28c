//go:build linux

package shm

import (
	"context"
	"io"
)

// launchRun starts nproc ranks of args under the launcher (package
// launch, set by launch_test.go: launch imports shm, so only an external
// test may import it); isExitError tells the launcher's error for a rank
// that failed.
var (
	launchRun   func(ctx context.Context, nproc int, args, env []string, out io.Writer) error
	isExitError func(error) bool
)

// SetLauncher sets launchRun and isExitError (tests only).
func SetLauncher(run func(ctx context.Context, nproc int, args, env []string, out io.Writer) error, exitErr func(error) bool) {
	launchRun, isExitError = run, exitErr
}
