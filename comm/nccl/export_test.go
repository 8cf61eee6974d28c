package nccl

// StopHeartbeat stops c's heartbeats without a goodbye, as if its process
// had died (with the fake's cudafake.Vanish for its kernels).
func StopHeartbeat(c *Comm) { c.stopHeartbeat() }
