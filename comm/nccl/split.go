//go:build cgo

package nccl

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/gdist/gdist/comm"
)

// Split: see comm.Comm. The ranks exchange (color, key) through the store,
// the first member of each new group creates its unique id, and the members
// join a new NCCL communicator on the same devices. Closing c closes the
// Comms split from it.
func (c *Comm) Split(ctx context.Context, color, key int) (comm.Comm, error) {
	const name = "split"
	if ctx == nil {
		return nil, comm.InvalidArgf("%s: nil context", name)
	}
	if color < 0 && color != comm.ColorNone {
		return nil, comm.InvalidArgf("%s: color %d is negative (use comm.ColorNone to opt out)", name, color)
	}
	c.mu.Lock()
	if err := c.errLocked(name, 0); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	c.splits++
	base := fmt.Sprintf("%s/split%d", c.path, c.splits)
	c.mu.Unlock()
	wrap := func(err error) error { return &comm.OpError{Op: name, Rank: c.reportRank, Err: err} }

	members := []int{0}
	if c.size > 1 {
		if err := c.store.Set(ctx, base+"/ck/"+strconv.Itoa(c.rank), []byte(fmt.Sprintf("%d %d", color, key))); err != nil {
			return nil, wrap(err)
		}
		if color == comm.ColorNone {
			return nil, nil
		}
		type mem struct{ key, rank int }
		var ms []mem
		for r := 0; r < c.size; r++ {
			v, err := c.store.Get(ctx, base+"/ck/"+strconv.Itoa(r))
			if err != nil {
				return nil, wrap(err)
			}
			var col, k int
			if _, err := fmt.Sscanf(string(v), "%d %d", &col, &k); err != nil {
				return nil, wrap(fmt.Errorf("%w: rank %d published color and key %q", comm.ErrProtocol, r, v))
			}
			if col == color {
				ms = append(ms, mem{k, r})
			}
		}
		sort.Slice(ms, func(i, j int) bool {
			if ms[i].key != ms[j].key {
				return ms[i].key < ms[j].key
			}
			return ms[i].rank < ms[j].rank
		})
		members = members[:0]
		for _, m := range ms {
			members = append(members, m.rank)
		}
	} else if color == comm.ColorNone {
		return nil, nil
	}
	rank := -1
	for i, r := range members {
		if r == c.rank {
			rank = i
		}
	}
	path := fmt.Sprintf("%s/c%d", base, color)
	id, err := exchangeID(ctx, c.lib, c.device, c.store, path+"/id", rank == 0, len(members))
	if err != nil {
		return nil, wrap(err)
	}
	child, err := open(ctx, c.lib, params{id: id, size: len(members), rank: rank, reportRank: rank, device: c.device,
		opts: c.opts, store: c.store, path: path})
	if err != nil {
		return nil, wrap(err)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		child.Close()
		return nil, wrap(comm.ErrClosed)
	}
	c.children = append(c.children, child)
	c.mu.Unlock()
	child.startWatch(false)
	if len(members) > 1 {
		if err := child.connect(ctx); err != nil {
			child.Close()
			return nil, wrap(err)
		}
	}
	return child, nil
}
