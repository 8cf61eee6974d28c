// Package tcp is the TCP transport of gdist: an algo.Transport over a full
// mesh of authenticated TCP connections, one per pair of ranks. Importing it
// registers the "tcp" backend with package comm (see register.go).
//
// # Building the mesh
//
// New publishes this rank's listening address in the rendezvous store under
//
//	<prefix>/<job>/<gen>/addr/<rank>
//
// and its peer info (address, where the address came from, host id and
// network namespace) under .../info/<rank>, reads the infos of the ranks it
// links with, and then rank i dials every rank j < i and accepts a
// connection from every rank j > i. With Options.Peers the mesh is partial:
// only the listed ranks are linked (composite transports such as the auto
// backend reach the others another way). prefix is Options.Prefix ("tcp"),
// job is Config.Job, and gen counts the transports this rank has built on
// the store for that job (a per-rank counter kept in the store), so a
// rebuilt mesh never meets the connections or stale addresses of an earlier
// one, as long as every rank rebuilds the same number of times.
//
// Every connection runs the auth handshake with the job token. The hellos it
// authenticates carry a hash of (prefix, job), gen, the world size and both
// ranks; a connection that fails the handshake or carries the wrong hello
// (another job, another generation, a rank that should not dial us, a
// duplicate) is refused, closed and logged with its remote address, and the
// acceptor goes on waiting for the right peers. Once complete, the listener
// is closed.
//
// # Addresses
//
// The advertised host is, in order: Config.Host; Options.Host ($GDIST_HOST);
// an address of the interface named by Options.SocketIfname
// ($GDIST_SOCKET_IFNAME; comma-separated names, the first that exists with
// an address wins; IPv4, else global IPv6, else link-local IPv6); else the local address of this rank's connection to the
// store, when the store client tells it (rendezvous.Client.LocalAddr): by
// construction an address on a network the store's host reaches, and a
// loopback address only when the store is reached over loopback; else
// 127.0.0.1. A host found on a local interface or connection is listened on
// as is; a host given by the user that is not loopback is listened on on all
// interfaces (it may be a NAT address). "localhost" means 127.0.0.1.
//
// # Failing fast
//
// Each rank checks its links before dialing: if of two linked ranks in
// different network namespaces (different hosts; the namespace is read
// from /proc/self/ns/net, falling back to the host id) the lower one
// advertised a loopback address, both fail at once with an error naming
// that rank, its address, where the address came from, and GDIST_HOST /
// GDIST_SOCKET_IFNAME. Once every linked rank has published its info, the
// mesh must complete within Options.ConnectTimeout ($GDIST_CONNECT_TIMEOUT,
// a Go duration or seconds; DefaultConnectTimeout, 20 s): a rank that cannot
// connect to a peer stops retrying then and fails naming the peer, its
// address, the last cause (refused, no route, timeout) and the variable to
// set. The first rank to fail posts its error under .../fail in the store;
// every other rank still building the mesh fails with it at once. Waiting
// for ranks that never publish anything is bounded by New's ctx and
// Config.OpTimeout(); New then fails naming them.
//
// # Sockets
//
// Every link has TCP_NODELAY. A link whose two ends are on this host (the
// peer's address is a loopback address or this end's own) runs the
// congestion control Options.Congestion ($GDIST_TCP_CONGESTION), Reno by
// default: over loopback the kernel's common default, BBR, paces the
// sender by its bandwidth estimate and moved 20-30% less than Reno in a
// 2-process exchange on a 2-core machine (DefaultCongestion). Links
// between hosts keep the kernel's default.
//
// The backend's collectives pipeline in chunks of ChunkBytes (4 MiB, one
// frame) rather than algo's default, unless $GDIST_CHUNK_BYTES says
// otherwise: each chunk is a message, and per message both ranks pay
// wakeups and system calls that a loopback link, busy copying, cannot hide.
//
// # Frames and streams
//
// A message is sent as one or more frames of at most wire.MaxFrame bytes, each
// a wire.Header followed by its payload (a zero-length message is one frame
// with Len 0). Each connection has a write lock taken per frame, so messages
// of different streams interleave at frame granularity; a per-stream send
// lock, held for a whole message, keeps the frames of two messages of one
// stream from interleaving. Frames of one message therefore arrive in order
// and contiguously within their stream.
//
// One reader goroutine per connection decodes headers (wire.Decode bounds
// every size). If a Recv is posted on the frame's stream and nothing is queued
// there, the frame is checked against it (wire.Match with Total = len(dst),
// and Offset = bytes received so far) and its payload is read from the socket
// straight into the caller's buffer; otherwise the payload is read into a
// pooled buffer (power-of-two size classes, reused without zeroing) and
// queued. Before it queues a frame of 64 KiB or more while nothing is
// queued on the link, the reader waits up to 200 us for its receive to be
// posted (conn.awaitPost): the algorithms post the receive of a message
// right after the previous one completes, usually just after the reader
// has met the next header, and a queued payload costs one more copy (or
// a reduction from a buffer no longer in cache). A wait that times out
// makes the reader queue the next 8 frames without waiting, so a receive
// posted late costs the link at most that delay. Queued ("unexpected") bytes per connection are capped
// (Options.MaxUnexpected, 1 GiB by default): a peer that exceeds the cap is a
// protocol error. A Recv first consumes queued frames (copying), then posts
// itself. A frame that does not match fails the Recv with a
// *wire.MismatchError and is discarded. If a Recv ends (ctx, abort, failure)
// while the reader is writing into its buffer, it waits for that frame's read
// to finish, so user memory is never written after Recv returns; the stream
// may then hold part of a message, which is fine since the caller poisons the
// Comm after any failure.
//
// RecvPayload (algo.PayloadReceiver, which the reductions use to reduce
// straight from the received bytes) works the same way, except that a frame
// for a posted RecvPayload is read through the reader's staging buffer, a
// quarter MiB at a time, and each piece is handed to its fn on the reader's
// goroutine while it is still in cache; queued frames are handed to fn by
// the caller's goroutine (for a message to this rank itself, by the
// sender's). Either way fn never runs after RecvPayload returns.
//
// Sends to this rank itself are copied into the local mailbox.
// The mailbox (streams, queued frames, posted receives, send locks) is
// comm/internal/mailbox, shared with comm/shm; the transport-level tests
// both run are comm/algo/transporttest.
//
// # Liveness and failure
//
// A connection that has written nothing for PeerDeadline()/3 sends a
// heartbeat; the reader gives up after PeerDeadline() without a byte, and a
// frame write that stalls for PeerDeadline() also loses the peer. Cancelling
// a Send's ctx takes effect between frames: a frame already on its way is
// finished (so the byte stream stays intact). A lost peer (EOF or reset
// without goodbye, timeout, garbage, protocol error) fails the whole
// transport: every pending and later Send and Recv returns the first failure,
// a *comm.PeerError wrapping comm.ErrPeerLost or comm.ErrProtocol. The failed
// transport cuts the culprit's link and says goodbye on the others with the
// failure as the goodbye's reason, so that the healthy ranks blame the
// culprit, not this rank, even when they are not linked to it at that moment:
// their errors read "rank 2: closed its comm after a failure (rank 2: rank 1:
// peer lost ...)".
//
// A peer that closes in good order sends a goodbye: later Recvs from it fail
// with a *comm.PeerError wrapping comm.ErrClosed once the frames it sent
// before are used up; the rest of the transport is unaffected.
//
// Abort fails the ops of one group locally and sends abort frames to the
// listed peers, whose ops of that group then fail with an error wrapping
// comm.ErrAborted that quotes "rank N aborted: reason".
//
// # Environment
//
// The transport reads its variables (GDIST_HOST, GDIST_SOCKET_IFNAME,
// GDIST_CONNECT_TIMEOUT, GDIST_TCP_CONGESTION) in one place, env.go, when
// it is built, into the Options fields left empty; a field set by the
// caller wins. GDIST_HOST_ID is read by comm/internal/host, the tuning
// variables (GDIST_CHUNK_BYTES, GDIST_ALGO, ...) by comm/algo.
package tcp
