// Package shm is the shared-memory transport of gdist: an algo.Transport
// for processes on one host, which exchange data through one memory-mapped
// file per job. Importing it registers the "shm" backend with package comm
// (see register.go); the "auto" backend (comm/auto) uses it between the
// ranks of each host and TCP across hosts. It needs Linux (futexes,
// pidfds); elsewhere New fails with comm.ErrUnsupported.
//
// # The segment
//
// The file holds a header (geometry, the creating process, a random nonce,
// the world rank of every local rank), one slot per rank and, for every
// ordered pair of ranks (i, j), a control block, a small control ring and a
// data ring (Options.RingBytes, 256 KiB by default, small enough to stay in
// cache) that only i writes and only j reads:
//
//	slot:  pid and start time, proof of the token, state (attached or
//	       closed), doorbell and control-bell futex words, heartbeat,
//	       goodbye reason
//	pair:  tail (written by i), head (written by j), the counts of
//	       waiters asleep on either side, control ring, data ring
//	area:  after the pairs, one per rank (Options.AreaBytes, 1 GiB by
//	       default): the shared buffers of Alloc (below)
//
// Every word that two processes write sits on its own cache line and is
// accessed with sync/atomic. The rings are single-producer,
// single-consumer: i copies a record in and publishes the new tail; j
// copies it out and publishes the new head. A record is a 64-byte prefix
// (length, type), a wire.Header and the payload; a message longer than
// Options.FrameBytes (64 KiB by default) is sent as several records, so
// the receiver copies one frame while the sender writes the next. A
// record never wraps; a pad record fills the end of the ring. The
// receiver validates every record (length within what is published, a
// header that wire.Decode accepts and whose length matches) before it
// reads a payload byte; a malformed one fails the transport with a
// comm.ErrProtocol naming the sender. So a Send is one copy into the ring
// (once there is space) and a Recv one copy out of it, with no system call
// on the path while both sides are busy. RecvPayload (algo.PayloadReceiver)
// skips the copy out: it hands each frame, where it lies in the ring, to
// the caller's function, so the reductions read the peer's data straight
// from the segment. A message allocates nothing in steady state: streams,
// send locks and receive records are kept on per-link free lists.
//
// Single-copy transfers (process_vm_readv) were measured and rejected: on
// this machine the kernel copy of 256 KiB chunks (3.8 GB/s on one core) is
// slower than the two memcpys through a ring that stays in cache (4.4 GB/s
// of payload on one core), and the two copies run on two cores in
// parallel.
//
// # Shared buffers: zero-copy collectives
//
// The Transport is an algo.SharedMemory: comm.Alloc on a Comm over it
// (the "shm" backend, or "auto" with every rank on this host) returns a
// Buffer in this rank's area of the segment, and an all-reduce, reduce,
// reduce-scatter or all-gather whose buffers every rank got that way runs
// without moving data through the rings: each rank reduces its block of
// the buffer reading the peers' buffers where they lie and writes the
// result into its own and theirs (comm/algo's allreduce_zerocopy.go has
// the algorithm). For a 2-rank all-reduce each rank reads half of the
// peer's buffer and writes that half back, against a copy into the ring
// and a copy out of it for each byte of the ring path. An all-reduce of
// ordinary buffers (or mixed: some rank's is ordinary memory) is staged
// (2 ranks: any size; more: from 128 KiB) (comm/algo's allreduce_staged.go): each rank copies
// the blocks its peers reduce into a staging area it keeps in its area
// (with streaming stores: rewriting lines a peer has read is 5x slower
// with ordinary ones when the vCPUs sit far apart),
// reduces its own block reading theirs, and copies the peers' results
// out of theirs, on the calling goroutine with two waits on flag-block
// counters per 1 MiB piece (Pulse keeps a waiting peer polling while a
// rank copies); the other collectives on such buffers take the rings.
// Since peers write into a rank's buffer, a rank whose zero-copy op fails
// waits (Quiesce: at most the peer deadline) until every peer still alive
// has said it is done with it before it returns.
//
// The areas are mapped apart from the rings: Close unmaps the rings at
// once, and the areas when the last buffer allocated there is freed, so a
// Buffer from Alloc stays valid memory after Close (freeing it twice or
// after Close does nothing). Each rank allocates from its own area only
// (first fit in 64-byte granules); the file is sparse on tmpfs, so the
// areas cost address space, not memory: Alloc commits the pages of a
// buffer (fallocate, so that a full tmpfs fails Alloc with an error that
// says so instead of a SIGBUS later) and free gives them back
// (FALLOC_FL_PUNCH_HOLE). An area starts with 64 KiB of flag blocks, two
// counters on cache lines of their own (armed, fin) that a zero-copy op
// publishes its progress in (Publish, Await: the waits of the rings,
// with the same failure handling: a lost peer, an abort, a goodbye or the
// end of ctx ends them with the error a Recv would get). $GDIST_SHM_AREA_BYTES (or
// Options.AreaBytes) sizes the areas; 0 turns them off (Alloc then gives
// ordinary memory).
//
// The measurements that rejected process_vm_readv above were of a copy
// into a rank's own buffer; reading the peer's buffer through a shared
// mapping costs no system call and no page pinning, and the reduction
// reads it directly.
//
// # Streams and receives
//
// A stream is (sender, group, kind[, tag]) as in algo.Transport; one ring
// carries all streams of a pair, interleaved at record granularity (a
// per-stream lock keeps each message's frames in order). The receiving side
// keeps a mailbox per link (comm/internal/mailbox, shared with comm/tcp):
// a Recv first takes frames queued for its
// stream, then posts itself and drains the ring: whoever holds the link's
// consumer role copies each frame straight into the posted receive of its
// stream, or, if none is posted, into a queued copy (at most
// Options.MaxUnexpected bytes per link; more is a protocol error). Frames
// are checked with wire.Match before a byte is written; a mismatch fails
// that receive with a *wire.MismatchError. A Recv that ends (ctx, abort,
// failure) while a frame is being copied into its buffer waits for that
// copy, so user memory is never written after Recv returns. A sender whose
// ring stays full (its messages are not being received yet) asks the
// receiver's control goroutine to drain the ring into queues, so Send
// never waits for a receive to be posted.
//
// # Waiting
//
// A waiter polls the shared words without giving up its processor for an
// adaptive window of at most 20 us (Options.PollFor, $GDIST_SHM_POLL_US;
// 0: never): a
// wait that ends within (about) twice the window doubles it, one that
// outlasts it halves it, down to nothing. Past the window it keeps
// polling while the rank it waits for is itself polling: every polling
// waiter bumps its rank's pulse word (in its slot) at each clock read,
// about every 64 polls, and a waiter that sees its peer's pulse move
// during this wait, and not more than 10 us ago, goes on, for at most
// 1 ms (Options.ActiveFor, $GDIST_SHM_ACTIVE_US; 0: never). A peer that polls runs on
// another processor and answers within microseconds, so yielding or
// sleeping then would only add a wake-up, which was the tail of small
// messages; a peer that computes, sleeps or was descheduled (a loaded
// machine) stops pulsing, and only movement seen while this waiter runs
// counts, so two ranks that share one processor do not keep each other
// spinning (and after 4 waits in a row that saw no pulse, only every 16th
// wait looks for one). The waiter then polls while yielding (sched_yield,
// so that a peer process on the same core can run, and every fourth time,
// if some goroutine of the process waits for a processor,
// runtime.Gosched, so that it runs: a large message's send started on
// this processor; with none waiting, Gosched would only wake an idle
// thread, which takes a CPU from a rank for 20-40 us on a small VM) for
// 50 us (Options.SpinFor, $GDIST_SHM_SPIN_US), or until a yield takes longer than 20 us
// (it gave the processor to another thread for a time slice: the
// machine is oversubscribed, by other jobs or by more ranks than cores,
// and the waiter would poll again only when its turn came round, long
// after its peer answered; after two such waits in a row the next ones
// skip yielding, but every 16th, which probes), then sleeps on its
// rank's doorbell, a futex word in its slot, after counting itself in the slot's sleepers and in the
// pair's waiter count. Whoever makes its condition true (a peer
// publishing data or freeing space, a local receive finishing its op, a
// failure, an abort, the end of its ctx) checks those counts after the
// change and rings the doorbell (FUTEX_WAKE) only if someone sleeps.
// Sleeps are bounded, so a lost wake-up would cost time, never a hang.
// The segment is mapped with MAP_POPULATE, so the first messages through
// a ring take no page faults.
//
// # Liveness and failure
//
// Each rank runs one control goroutine. It sleeps until the rank's control
// bell rings, for at most a tick (PeerDeadline()/4, at most 100 ms), bumps
// the rank's heartbeat, reads the control rings (aborts), and checks every
// peer: a goodbye in its slot, its process (a pidfd, or kill(pid, 0) and
// the start time where pidfds are unavailable), and its heartbeat. A peer
// whose process died, or whose heartbeat stood still for PeerDeadline()
// (a hung process), is lost: the whole transport fails, every pending and
// later Send and Recv returns a *comm.PeerError wrapping comm.ErrPeerLost
// naming it (a SIGKILLed peer is noticed within a tick), and this rank
// says goodbye with the failure as the reason, so that the other ranks
// blame the culprit: their errors read "rank 2: closed its comm after a
// failure (rank 2: rank 1: peer lost: process 123 died)".
//
// A peer that closes in good order writes its goodbye (and reason, if it
// failed) into its slot: later Recvs from it fail with a *comm.PeerError
// wrapping comm.ErrClosed once the frames it sent before are used up, and
// Sends to it fail; the rest of the transport is unaffected.
//
// Abort fails the ops of one group locally and writes an abort record into
// the control ring of each listed peer, whose ops of that group then fail
// with an error wrapping comm.ErrAborted that quotes "rank N aborted:
// reason". Close says goodbye, fails pending calls with comm.ErrClosed,
// waits for the calls still inside the mapping to leave it, and unmaps it.
//
// The control goroutine sleeps in the network poller, on an abstract unix
// datagram socket of its rank (named from the job token and the
// segment's nonce), which whoever rings the bell also sends a byte to;
// a futex sleep would hold its P (the runtime's processor) in the system
// call, and sysmon, taking it back, would then wake every 20 us for a
// while on the cores the ranks poll on (ctrlwake_linux.go has the
// measurements). The bell word stays the record: a datagram only wakes
// the reader. Where the socket cannot be bound it sleeps on the bell's
// futex as before.
//
// # Rendezvous and the job token
//
// The ranks meet through the rendezvous store under
// <prefix>/<job>/<gen>/<leader>/ (prefix Options.Prefix, "shm"; gen counts
// the transports each rank has built; leader the lowest rank of the
// segment). The leader draws a random 32-byte nonce, creates the file in
// Options.Dir ($GDIST_SHM_DIR, else /dev/shm) exclusively with mode 0600,
// named gdist-shm-<pid>-<HMAC(token, nonce)>, and announces the nonce,
// geometry, ranks and host, signed with HMAC-SHA256 under the job token.
// A rank checks the signature before it opens anything, so a rank with
// another token fails at once with comm.ErrAuth and never learns the
// name; a rank on another host fails naming both hosts. Each rank checks
// that the file is a private regular file of its own user, claims its
// slot and writes HMAC(token, nonce, rank) into it; once all have
// attached every rank verifies every proof, so a process of the same user
// that found the file by listing the directory cannot join without the
// token (the same user can, of course, read any of its processes' memory;
// the token keeps out other jobs and misconfigured ranks). A rank that
// fails to join reports it under .../fail so the others stop waiting.
//
// # Cleanup
//
// The last rank to attach unlinks the file, so while the job runs the
// segment has no name and a crash, however abrupt, leaves nothing behind.
// Only a job that dies during setup (between create and the last attach)
// can leave a file; the next leader to start in that directory removes
// every gdist-shm-* file of its user whose creating process (pid and start
// time from the header, or the pid in the name) no longer runs, or that
// has no valid header and is older than ten minutes.
//
// # Environment
//
// The transport reads its variables (GDIST_SHM_DIR, GDIST_SHM_RING_BYTES,
// GDIST_SHM_FRAME_BYTES, GDIST_SHM_AREA_BYTES, GDIST_SHM_POLL_US,
// GDIST_SHM_SPIN_US, GDIST_SHM_ACTIVE_US) in one place, env.go, when it is
// built, into the Options fields left zero; a field set by the caller
// wins. GDIST_HOST_ID is read by comm/internal/host.
package shm
