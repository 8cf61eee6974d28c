package dp

import "time"

// SetDeviceCloseWait sets how long a device strategy's Close waits for
// pending collectives before it aborts the Comm, and returns how to
// restore it.
func SetDeviceCloseWait(d time.Duration) (restore func()) {
	old := deviceCloseWait
	deviceCloseWait = d
	return func() { deviceCloseWait = old }
}
