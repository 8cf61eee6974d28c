//go:build !linux

package launch

import (
	"os/exec"
	"syscall"
)

// childAttr puts a child in its own process group; WatchLauncher notices
// the launcher's death.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func startChild(cmd *exec.Cmd, cpus []int) error { return cmd.Start() }

// allowedCPUs is not known here: Spec.BindCPUs does nothing.
func allowedCPUs() []int { return nil }

// processStopped is not known here: a stopped rank is killed at the end of
// the grace period.
func processStopped(pid int) bool { return false }
