// Package multihost simulates several hosts on one Linux machine, for
// tests of multi-host jobs: each host is a network namespace (ip netns)
// with its own hostname (a UTS namespace) and its own /dev/shm (a mount
// namespace with a private tmpfs), and the hosts are joined by veth pairs
// to a bridge in a "switch" namespace, like machines on one Ethernet
// segment. Host i has the addresses 10.77.0.<i+1>/24 and fd77::<i+1>/64 on
// its interface eth0, and loopback.
//
// It needs root and the ip (iproute2), unshare and nsenter (util-linux)
// programs; New skips the test, saying why, where they are missing. Every
// namespace and process it makes is removed by t.Cleanup, also when the
// test fails; names carry the process id and a counter, so concurrent test
// runs do not collide. If the test process is killed, its processes die
// with it (parent-death signal) and the next New removes its namespaces.
//
// A process runs on a host through Host.Command (nsenter into the host's
// namespaces); tests usually run their own test binary as the worker.
//
// The package's own tests are the multi-host harness (`go test
// ./internal/multihost`, as root; about 1.5 minutes, the longest parts
// skipped with -short): two ranks on each of two hosts, started with the
// torchrun-style variables and no GDIST_HOST, run the conformance checks
// (commtest.RankChecks) over auto and tcp (tcp with an IPv6 store), and
// cmd/train, whose eval loss must equal that of four ranks on one host;
// killing a host's ranks and cutting a host's link must fail every rank
// within the peer timeout, naming a rank on the other side; a wrong address
// (unreachable, or loopback across hosts) must fail every rank within 30 s
// naming the rank, the address and GDIST_HOST. BenchmarkCommbenchHosts runs
// commbench over links shaped with tc.
package multihost
