package nccl

// WaitStats is how many times c's collectives' watcher polled an event
// and how many times it blocked on one (await).
func WaitStats(c *Comm) (queries, blocks int64) {
	return c.coll.waiter.Stats()
}
