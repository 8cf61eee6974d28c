package algo

// Abort poisons c with cause and tells the other members (comm.Aborter):
// every pending and later operation fails, here with cause, on the others
// with an error wrapping comm.ErrAborted that quotes it. The first failure
// wins: aborting a Comm that already failed changes nothing.
func (c *Comm) Abort(cause error) {
	c.fail(cause)
}
