package algo

import "strconv"

// Layout says where the ranks of a group run: which of them share a host.
// The cost model weighs the links inside a host (Tuning.Alpha, Beta)
// against those between hosts (InterAlpha, InterBeta) with it, and the
// hierarchical all-reduce (allreduce_hierarchical.go) follows it.
//
// A Comm takes its layout from a Transport that is a HostMap (comm/auto);
// over any other transport every group is on one host.
type Layout struct {
	p     int
	host  []int   // host index of each rank, hosts numbered in order of first appearance; nil: one host
	ranks [][]int // the ranks of each host, in rank order
	local int     // ranks per host when every host has the same number, else 0
}

// HostMap is an optional extension of Transport for transports that know
// which ranks share a host (comm/auto): Hosts returns a host id for every
// world rank; ranks with equal ids share a host.
type HostMap interface {
	Hosts() []string
}

// OneHost is the layout of p ranks on one host.
func OneHost(p int) Layout {
	return Layout{p: p, local: p}
}

// NewLayout is the layout of len(hostIDs) ranks, rank r on host
// hostIDs[r] (ranks with equal ids share a host).
func NewLayout(hostIDs []string) Layout {
	idx := map[string]int{}
	l := Layout{p: len(hostIDs), host: make([]int, len(hostIDs))}
	for r, id := range hostIDs {
		h, ok := idx[id]
		if !ok {
			h = len(idx)
			idx[id] = h
			l.ranks = append(l.ranks, nil)
		}
		l.host[r] = h
		l.ranks[h] = append(l.ranks[h], r)
	}
	if len(l.ranks) <= 1 {
		return OneHost(l.p)
	}
	l.local = len(l.ranks[0])
	for _, rs := range l.ranks {
		if len(rs) != l.local {
			l.local = 0
		}
	}
	return l
}

// Size is the number of ranks.
func (l Layout) Size() int { return l.p }

// Hosts is the number of hosts (1 for an empty group).
func (l Layout) Hosts() int { return max(len(l.ranks), 1) }

// Local is the number of ranks on each host when every host has the same
// number, else 0.
func (l Layout) Local() int { return l.local }

// MaxLocal is the largest number of ranks on one host.
func (l Layout) MaxLocal() int {
	m := l.local
	for _, rs := range l.ranks {
		m = max(m, len(rs))
	}
	return m
}

// Host returns the host index of rank r (0 on a one-host layout).
func (l Layout) Host(r int) int {
	if l.host == nil {
		return 0
	}
	return l.host[r]
}

// HostRanks returns the ranks on host h, in rank order (not to be
// modified).
func (l Layout) HostRanks(h int) []int {
	if l.ranks == nil {
		r := make([]int, l.p)
		for i := range r {
			r[i] = i
		}
		return r
	}
	return l.ranks[h]
}

// sub is the layout of the ranks rs of l (in that order).
func (l Layout) sub(rs []int) Layout {
	if l.host == nil {
		return OneHost(len(rs))
	}
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = strconv.Itoa(l.host[r])
	}
	return NewLayout(ids)
}
