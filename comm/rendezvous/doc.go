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
// # Joining (Connect)
//
// Without GDIST_STORE_ADDR, rank 0 serves the store itself, on
// MASTER_ADDR:port when MASTER_ADDR is an IP address of its host
// (127.0.0.1 keeps it off the network; an address that is not local, a NAT
// address say, falls back to all interfaces, logged), and on all
// interfaces for a host name. Rank 0 dials the store on that address, so
// that the local address of its connection (Client.LocalAddr, which the tcp
// backend advertises by default) is one other hosts reach. If that dial ends
// up on loopback anyway (a MASTER_ADDR name that resolves to 127.0.1.1 on
// rank 0's host, or not at all), LocalAddr reports the address the other
// hosts reached the store at, learned once they have joined.
//
// Every rank then joins: the first sets rdzv/job (job id and world size;
// a later rank with others is refused), each claims rdzv/rank/<rank> with
// its process identity (pid, hostname, address) by CompareAndSet, and all
// wait until every rank has claimed, at most Env.JoinTimeout
// (GDIST_JOIN_TIMEOUT, DefaultJoinTimeout). A process claiming a rank that
// is taken is refused with both identities: that is another job on the
// same MASTER_PORT, and the error says to give each job its own port, or
// its own GDIST_TOKEN or GDIST_JOB_ID. The job id is GDIST_JOB_ID, else the
// launcher's (torchrun, Open MPI, Slurm), else empty.
//
// # Security
//
// Every connection to the store proves the job token with the HMAC
// handshake of comm/internal/auth before its first request; a connection
// that fails is closed and logged ("refused connection from ..."). Without
// GDIST_TOKEN the token is derived from the job id, which anyone on the
// cluster can read; Env.TokenDerived says so, and InitComm warns.
//
// Refusals are logged one line each for the first few, then as a count at
// most every 10 s (and at Close). A store client that sends a valid store
// hello and then fails the token proof is taken for a rank with the wrong
// GDIST_TOKEN: the server records it under RefusedKey, and the ranks
// waiting to join fail if no rank joins within a few seconds after it,
// saying from which address and that every rank needs the same
// GDIST_TOKEN. The refused rank itself fails at once, saying the same.
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
