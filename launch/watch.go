package launch

import (
	"os"
	"time"
)

// WatchLauncher returns a channel that is closed when the launcher that
// started this worker (GDIST_LAUNCHER_PID) is gone: killed, even with
// SIGKILL, or crashed. A worker stops when it closes (after saving, if it
// can), so no worker outlives its launcher. It returns nil (never closed)
// for a process our launcher did not start. It polls the parent process
// id every poll; Linux also delivers SIGTERM at the launcher's death
// (Run's children get a parent-death signal), which this backs up.
func WatchLauncher(poll time.Duration) <-chan struct{} {
	pid := launcherPID()
	if !IsWorker() || pid == 0 {
		return nil
	}
	gone := make(chan struct{})
	go func() {
		for os.Getppid() == pid {
			time.Sleep(poll)
		}
		close(gone)
	}()
	return gone
}
