package algo

import (
	"math"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/internal/reduce"
)

// All-reduce in two levels, for groups that span hosts (Layout): the ranks
// of a host work together over the fast links inside it, and only a
// share of the data crosses the slower links between hosts, each byte
// once per direction. With m ranks on each of H hosts (local index i: the
// i-th rank of its host), three plans:
//
//   - rs: a reduce-scatter among the ranks of each host (the ring, in
//     place: local index i ends with block i of the host's sum), an
//     all-reduce of block i among the H ranks with local index i (the m
//     blocks cross the hosts' links side by side), an all-gather among
//     the ranks of each host. The bytes between hosts are those of an
//     all-reduce of n over H ranks, not over mH: the choice for large
//     messages.
//   - ar: an all-reduce of the whole message inside each host, then
//     among the ranks with the same local index: the fewest rounds, for
//     small messages.
//   - leader: a reduce to the first rank of each host, an all-reduce
//     among those, a broadcast inside each host. The only plan when hosts
//     have different numbers of ranks.
//
// The cost model (Tuning) takes the cheapest plan, each phase run by the
// cheapest algorithm of its collective for its part of the group; where
// the group is on one host, or has one rank per host, the algorithm runs
// the cheapest flat all-reduce instead (GDIST_ALGO=all_reduce=hier forces
// it anyway). Every message carries the hier algorithm id; the phases use
// the Comm's group, the ranks of one host talking only inside the host
// phases and ranks of different hosts only in the cross phase, so their
// messages never share a stream at the same time.
//
// Avg reduces as Sum in every phase and divides once, by the group size,
// in the cross phase (rs: each rank its block; the others: the whole
// message).
//
//	cost: the cheapest plan's, see Tuning

// never is the cost of an algorithm that does not apply.
const never = math.MaxInt64 / 4

type hierKind int

const (
	hierNone   hierKind = iota // one host, or one rank per host: run flat
	hierRS                     // reduce-scatter, all-reduce across, all-gather
	hierAR                     // all-reduce inside, all-reduce across
	hierLeader                 // reduce to the leader, all-reduce among leaders, broadcast
)

func allReduceHierCost(t Tuning, n int, l Layout) int64 {
	_, c := hierPlan(t, n, l)
	return c
}

// hierPlan is the cheapest plan for n bytes over l, and its cost.
func hierPlan(t Tuning, n int, l Layout) (hierKind, int64) {
	hosts, most := l.Hosts(), l.MaxLocal()
	if hosts < 2 || most < 2 {
		return hierNone, never
	}
	spread := spreadLayout(hosts)
	// across is an all-reduce of b bytes between the hosts, share ranks of
	// each host sending through its link at once.
	across := func(b, share int) int64 {
		tx := t.share(share)
		_, c := tx.cheapest("all_reduce", b, spread, AlgoHier)
		return c
	}
	kind, cost := hierNone, int64(never)
	if m := l.Local(); m > 0 {
		cost = reduceScatterRingCost(t, n, m) + across(n/m, m) + allGatherRingCost(t, n, m)
		kind = hierRS
		_, ar := t.cheapest("all_reduce", n, OneHost(m), AlgoHier)
		if c := ar + across(n, m); c < cost {
			kind, cost = hierAR, c
		}
	}
	_, red := t.cheapest("reduce", n, OneHost(most), 0)
	_, bc := t.cheapest("broadcast", n, OneHost(most), 0)
	if c := red + across(n, 1) + bc; c < cost {
		kind, cost = hierLeader, c
	}
	return kind, cost
}

// share is t for a phase in which k ranks of each host send between hosts
// at once, sharing the host's link.
func (t Tuning) share(k int) Tuning {
	t.InterBeta *= int64(k)
	return t
}

// spreadLayout is the layout of p ranks, each on a host of its own.
func spreadLayout(p int) Layout {
	l := Layout{p: p, host: make([]int, p), ranks: make([][]int, p), local: 1}
	for r := range p {
		l.host[r] = r
		l.ranks[r] = []int{r}
	}
	return l
}

// on returns o run among the ranks rs of o's Comm (a view): the phases
// reduce as Sum where o averages, and choose their algorithms by the cost
// model alone.
func (o *op) on(rs []int) *op {
	v := *o
	v.c = o.c.view(rs)
	if v.red == comm.Avg {
		v.red = comm.Sum
	}
	v.tun.Force = nil
	return &v
}

// runCheapest runs collective opName with the algorithm the cost model
// prefers for n bytes on o's Comm (never the hierarchical one), keeping
// o's header.
func (o *op) runCheapest(opName string, n int, x call) error {
	a, _ := o.tun.cheapest(opName, n, o.c.layout, AlgoHier)
	return a.run(o, x)
}

func (o *op) allReduceHier(x call) error {
	buf := x.buf
	l := o.c.layout
	kind, _ := hierPlan(o.tun, len(buf), l)
	if f := o.tun.hierPlan; kind != hierNone && f != hierNone && (f == hierLeader || l.Local() > 0) {
		kind = f
	}
	if kind == hierNone {
		return o.runCheapest("all_reduce", len(buf), x)
	}
	me := o.c.rank
	locals := l.HostRanks(l.Host(me))
	li := 0
	for i, r := range locals {
		if r == me {
			li = i
		}
	}
	// cross is the rank with local index k on every host.
	cross := func(k int) []int {
		rs := make([]int, l.Hosts())
		for h := range rs {
			rs[h] = l.HostRanks(h)[k]
		}
		return rs
	}
	avg := func(b []byte) {
		if o.red == comm.Avg {
			reduce.Divide(o.dt, b, o.c.Size())
		}
	}
	in := o.on(locals)
	switch kind {
	case hierRS:
		m, es := len(locals), o.dt.Size()
		seg := bounds(len(buf)/es, m, es)
		if err := in.ring(buf, buf, seg, -1, true, false, nil); err != nil {
			return err
		}
		mine := buf[seg[li]:seg[li+1]]
		xo := o.on(cross(li))
		xo.tun = xo.tun.share(m)
		if err := xo.runCheapest("all_reduce", len(mine), call{buf: mine}); err != nil {
			return err
		}
		avg(mine)
		return in.ring(buf, buf, seg, -1, false, true, nil)
	case hierAR:
		if err := in.runCheapest("all_reduce", len(buf), x); err != nil {
			return err
		}
		xo := o.on(cross(li))
		xo.tun = xo.tun.share(len(locals))
		if err := xo.runCheapest("all_reduce", len(buf), x); err != nil {
			return err
		}
		avg(buf)
		return nil
	}
	// hierLeader
	if len(locals) > 1 {
		if err := in.runCheapest("reduce", len(buf), call{buf: buf, work: buf, root: 0}); err != nil {
			return err
		}
	}
	if li == 0 {
		if err := o.on(cross(0)).runCheapest("all_reduce", len(buf), x); err != nil {
			return err
		}
		avg(buf)
	}
	if len(locals) > 1 {
		return in.runCheapest("broadcast", len(buf), call{buf: buf, root: 0})
	}
	return nil
}
