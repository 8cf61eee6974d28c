//go:build linux

package shm_test // external: package launch imports shm (a cycle for package shm's own tests)

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gdist/gdist/comm/shm"
	"github.com/gdist/gdist/launch"
)

func init() {
	shm.SetLauncher(func(ctx context.Context, nproc int, args, env []string, out io.Writer) error {
		return launch.Run(ctx, launch.Spec{NProc: nproc, Args: args, Env: env, Stdout: out, Stderr: out, GracePeriod: time.Minute,
			Logf: func(format string, a ...any) { fmt.Fprintf(out, format+"\n", a...) }})
	}, func(err error) bool {
		var ee *launch.ExitError
		return errors.As(err, &ee)
	})
}
