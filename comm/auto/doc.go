// Package auto is the backend that picks the transport per peer: shared
// memory (comm/shm) between the ranks of one host, TCP (comm/tcp) across
// hosts, so one job may use both. Importing it registers the "auto"
// backend with package comm (see register.go).
//
// Where every rank can use NCCL (CUDA and NCCL load at run time, each
// host has a GPU per local rank, and no two ranks would use one GPU:
// nccl.GPUOf, the host and PCI bus id, as a container-wide
// NVIDIA_VISIBLE_DEVICES=0 gives every process "its one GPU"; PickNCCL,
// agreed through the store; comm/nccl's TestAutoRefusesSharedVisibleGPU)
// the "auto" backend builds the "nccl" Comm instead (host buffers are
// then staged through the GPU); GDIST_AUTO_NCCL=0 on any rank keeps it on
// shared memory and TCP. There, when CUDA is present, the host Comm is
// wrapped with comm/staging's Adapt, so that it takes device buffers too
// (staged through pinned memory).
//
// # Building
//
// Each rank publishes its host identity in the rendezvous store under
// <prefix>/<job>/<gen>/host/<rank> (prefix Options.Prefix, "auto"; gen
// counts the transports each rank has built) and reads everyone's. The
// identity is Options.HostID, else shm.HostID(): $GDIST_HOST_ID if set,
// else the hostname and the kernel's boot id (/proc/sys/kernel/random/
// boot_id), so that two containers, or two boots, of one machine never
// look alike. GDIST_HOST_ID also lets tests fake a multi-host job on one
// machine.
//
// The ranks with this rank's identity build one shared-memory transport
// (shm.Options.Ranks, keys under <prefix>/shm), every host its own; if
// some ranks are elsewhere, all ranks also build a partial TCP mesh that
// links each rank only with the ranks on other hosts (tcp.Options.Peers,
// keys under <prefix>/tcp). A job on one host never opens a socket
// (besides the store's). Across hosts the TCP part advertises the address
// package tcp picks (GDIST_HOST, else GDIST_SOCKET_IFNAME, else the local
// address of the rank's connection to the store) and fails fast on a
// loopback or unreachable one; it names hosts by this package's host id. Where shared memory is unsupported (not Linux),
// every peer is reached over TCP.
//
// # Layout
//
// The Transport is an algo.HostMap (Hosts), so the Comms built on it know
// which ranks share a host (algo.Layout): the cost model costs the links
// between hosts (TCP) apart from those inside one (shared memory), and
// picks the hierarchical all-reduce (algo's allreduce_hierarchical.go:
// shared memory inside each host, only a share of the data over TCP)
// where it beats the flat algorithms.
//
// # Dispatch and failure
//
// Send and Recv go to the part that reaches the peer; messages to this
// rank itself use the shared-memory part's mailbox. Abort tells each
// listed peer through its part and fails the group's ops in both parts; a
// peer's abort that arrives through one part fails the group's ops in the
// other one too (at once for aborts arriving over shared memory; for those
// arriving over TCP as soon as an op of the group on the TCP part reports
// it, since the TCP transport offers no callback).
//
// The two parts fail together, like one transport: when either part loses
// a peer (or sees a protocol error) the shared-memory part fails with that
// error, saying goodbye with it as the reason, and pending and later TCP
// ops return it; a watcher notices failures that happen while no op runs
// within PeerDeadline()/4 (at most 100 ms). Close closes both parts.
package auto
