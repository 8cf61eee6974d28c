//go:build !linux

package launch

import (
	"os/exec"
	"syscall"
)

// childAttr puts a child in its own process group; WatchLauncher notices
// the launcher's death.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func startChild(cmd *exec.Cmd) error { return cmd.Start() }
