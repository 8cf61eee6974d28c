// Package rendezvous is how the ranks of a job find each other: a small TCP
// key-value store (Server, and Dial for a client implementing comm.Store),
// and the env:// initialisation that reads the variables set by our own
// launcher (package launch), torchrun, Open MPI's mpirun and Slurm's srun
// (FromEnv, Connect, InitComm).
//
// # Typical use
//
//	c, closeFn, err := rendezvous.InitComm(ctx, "tcp", comm.Options{})
//	if err != nil { ... }
//	defer closeFn()
//
// # Security
//
// Every connection to the store proves the job token with the HMAC
// handshake of comm/internal/auth before its first request; a connection
// that fails is closed and logged ("refused connection from ..."). Without
// GDIST_TOKEN the token is derived from the job id, which anyone on the
// cluster can read; Env.TokenDerived says so, and InitComm warns.
//
// # Wire protocol
//
// Length-prefixed binary frames carry requests tagged with ids, so one
// connection serves concurrent callers and a blocked Get or Wait does not
// hold up others (see request in protocol.go for the layout). Every length
// read from the network is bounded (MaxKeyLen, MaxValueLen, MaxWaitKeys)
// and checked before allocation; a malformed frame closes that connection
// and is logged, and never affects the server's other connections.
//
// Values set with Add are stored as decimal text ("42"). The store keeps
// everything in the memory of the process running the Server; nothing is
// ever deleted.
package rendezvous
