package devmodel

import (
	"errors"
	"fmt"

	"github.com/gdist/gdist/gpu/cuda"
)

// ZeRO-2 and ZeRO-3 on the device (Config.ShardGrads, Config.ShardParams).
//
// The plan's ops are grouped into units: runs of consecutive ops, last
// first, each closed at an op's edge once its parameters span at least
// Config.UnitFloats values of the flat buffers (a unit per layer with a
// small UnitFloats, the whole model with a large one). A unit's ops
// read and write only the parameters and gradients of its range [Lo, Hi)
// of the flat buffers, so while they run the model's Params (ZeRO-3) and
// Grads (ZeRO-2, 3) may point into a block holding that range only: the
// ops compute their addresses from d.Params and d.Grads when they run.
//
// With ShardGrads the gradient buffer holds the shard's values only
// (Shard.Len() float32s). Backward writes each unit's gradients into a
// block of its own (zeroed), then calls ReduceGrads, which starts
// averaging the block's values over the ranks into each value's owner;
// once the next unit's backward is queued, ForwardBackward waits for that
// reduction (the function ReduceGrads returned), adds the unit's part of
// this rank's shard into the shard's gradients and gives the block back:
// at most two units' gradient blocks are in use at once, the reduction
// of one overlapping the backward of the next. The blocks are laid out
// by their lives in one region of their exact sizes (unitMem).
//
// With ShardParams (which implies ShardGrads) the parameter buffer holds
// the shard only between steps too. Before a unit's forward, and again
// before its backward, GatherParams fills a block with the unit's
// parameters (every rank's shard of them); the block is released after
// the unit's ops are queued. The next unit's gather starts before this
// unit's ops are queued (a prefetch overlapping them; two units'
// parameter blocks held at once). Eval needs the whole model, since the
// ranks may evaluate different numbers of batches: Unshard gathers the
// full parameter buffer for it and Reshard returns to the shard.
//
// Streams: the gathers and reductions run on another stream than the
// model's (NCCL's), ordered with it by events only. Each call of
// GatherParams and ReduceGrads gets an event recorded on the model's
// stream just before it (after): a reduction waits for it (the unit's
// gradients written), and so does a gather, whose block was last read
// by ops queued before it (a block's memory is another's once its
// unit's ops are queued; whoever uses it next is ordered after them by
// that event, never by the host: TestGatherWaitsForReaders) and whose
// shard the last update wrote. The model's stream waits for the
// gather's or reduction's completion with the wait function they return
// (on the device: an event recorded after the collective), before the
// unit's ops, or the addition of the reduced gradients, are queued.

// Unit is a range of the flat buffers whose gradients backward completes
// together (ZeRO-2, 3 on the device).
type Unit struct {
	Lo, Hi int
	// first and last are the unit's ops (backward runs last to first);
	// k is the unit's place in the plan's units (last first)
	first, last, k int
}

// units splits p's ops into units, last first (backward's order).
func (d *Model) units(p *plan) []Unit {
	if d.unitsOf == p {
		return d.unitList
	}
	m := d.Host
	off := func(k int) int {
		if k < len(m.Params) {
			return m.Params[k].Offset
		}
		return d.N
	}
	least := max(d.cfg.UnitFloats, 1)
	var out []Unit
	cur := Unit{Hi: d.N, last: len(p.ops) - 1}
	for i := len(p.ops) - 1; i >= 0; i-- {
		lo := 0
		if i > 0 {
			lo = off(p.ops[i-1].params)
		}
		if i == 0 || (lo < cur.Hi && cur.Hi-lo >= least) {
			cur.Lo, cur.first, cur.k = lo, i, len(out)
			out = append(out, cur)
			cur = Unit{Hi: lo, last: i - 1}
		}
	}
	d.unitsOf, d.unitList = p, out
	return out
}

// Units are the current plan's units, last first (their count: the
// gradient reductions of a step; ZeRO-3's gathers per pass).
func (d *Model) Units() []Unit { return d.units(d.plan) }

// gradsSharded: Config.ShardGrads or ShardParams.
func (d *Model) gradsSharded() bool { return d.cfg.ShardGrads || d.cfg.ShardParams }

// paramsSharded: Config.ShardParams and not Unshard'd.
func (d *Model) paramsSharded() bool { return d.cfg.ShardParams && d.full == 0 }

// unitBlock is a unit's block: Bytes bytes at Ptr.
type unitBlock struct {
	Ptr   uintptr
	Bytes int
}

// unitMem is where the units' blocks live: one region of device memory
// of the exact size (malloc: placement memory, in PeakBytes), laid out
// for a plan's units by the blocks' lives over a step, as the training
// plan's buffers (memory.go's pack). Time runs through the units'
// forward passes (the unit at j of K, first unit first, at time j) and
// their backward passes (the unit at k of the units, last first, at K +
// k). A parameter block lives from the time before its unit's (its
// gather is started, after an event recorded on the model's stream,
// before the previous unit's ops are queued: a prefetch) to its unit's
// (released once its ops are queued); the first backward one from K
// (gathered after the forward pass); a gradient block from its unit's
// backward (zeroed, written) to that of the next unit with parameters,
// whose turn waits for the block's reduction and adds it into the shard
// (the last, to the step's end). Blocks whose lives do not meet share
// memory: whoever writes a block next is ordered after its last readers
// by the model's stream, or by the event a gather waits for; the
// reductions are waited for before their block's life ends. A block a
// failed step left to a collective still under way (drop) is never
// reused: the region is left held (until Close) and the next step lays
// out another. The region is laid out again for another plan (an
// evaluation's forward passes, another batch size), reused where it
// fits, else allocated again larger (the old one taken back if that
// fails, so that the plans it fitted run on); Unshard frees it (an evaluation
// holds the whole parameter buffer, no unit's blocks). TestUnitBlocksLaidOut;
// TestGatherWaitsForReaders and TestShardedUnitsMatchWhole fail with
// the lives a turn short.
type unitMem struct {
	region       uintptr
	size         int
	of           *plan     // the plan laid out for
	fwd, bwd, gr []uintptr // each unit's blocks (units' order; 0: none)
	abandoned    bool      // a block may still be written: never reuse the region
}

// freeUnits frees the units' blocks' region (Unshard: no unit is
// gathered or reduced until Reshard; the next sharded pass lays it out
// again), unless a collective may still write it.
func (d *Model) freeUnits() {
	if um := &d.umem; um.region != 0 && !um.abandoned {
		d.free(um.region, um.size) // after the model's work and the collectives it waited for
		*um = unitMem{}
	}
}

// unitBlocks lays out p's units' blocks (unitMem), if not laid out.
func (d *Model) unitBlocks(p *plan) (*unitMem, error) {
	if err := d.parkedErr(); err != nil {
		return nil, err
	}
	um := &d.umem
	if um.abandoned {
		*um = unitMem{} // left held (freed by Close)
	}
	if um.of == p && um.region != 0 {
		return um, nil
	}
	us := d.units(p)
	n := len(us)
	um.fwd, um.bwd, um.gr = make([]uintptr, n), make([]uintptr, n), make([]uintptr, n)
	var bufs []memBuf
	var to []*uintptr
	add := func(at *uintptr, bytes, start, end int) {
		bufs = append(bufs, memBuf{bytes: (bytes + arenaAlign - 1) / arenaAlign * arenaAlign, start: start, end: end})
		to = append(to, at)
	}
	for k, u := range us {
		if u.Hi <= u.Lo {
			continue
		}
		bytes := 4 * (u.Hi - u.Lo)
		if d.cfg.ShardParams {
			j := n - 1 - k // its forward turn
			add(&um.fwd[k], bytes, max(j-1, 0), j)
			start := n + k - 1
			if k == 0 {
				start = n
			}
			add(&um.bwd[k], bytes, start, n+k)
		}
		if d.gradsSharded() {
			end := 2 * n
			for k2 := k + 1; k2 < n; k2++ {
				if us[k2].Hi > us[k2].Lo {
					end = n + k2
					break
				}
			}
			add(&um.gr[k], bytes, n+k, end)
		}
	}
	top := max(pack(bufs), 1)
	if top > um.size {
		old := um.size
		if um.region != 0 {
			d.free(um.region, um.size) // after the model's work and the collectives it waited for
		}
		um.region, um.size, um.of = 0, 0, nil
		r, err := d.malloc(top)
		if err != nil {
			err = fmt.Errorf("devmodel: %s: %d bytes for the units' blocks: %w", d.Host.Name, top, err)
			// the old region back (the memory just freed), laid out again
			// on use, so that the plans that fitted it run as before
			if old > 0 {
				if r, rerr := d.malloc(old); rerr == nil {
					um.region, um.size = r, old
				}
			}
			return nil, err
		}
		um.region, um.size = r, top
	}
	for i, at := range to {
		*at = um.region + uintptr(bufs[i].off)
	}
	um.of = p
	return um, nil
}

// gathered is a unit's parameter block, being filled (ZeRO-3).
type gathered struct {
	u    Unit
	b    *unitBlock
	wait func() error
}

// startGather starts filling u's parameter block at[u.k] (nil: nothing
// to gather).
func (d *Model) startGather(u Unit, at []uintptr) (*gathered, error) {
	if !d.paramsSharded() || u.Hi <= u.Lo {
		return nil, nil
	}
	b := &unitBlock{at[u.k], 4 * (u.Hi - u.Lo)}
	var err error
	g := &gathered{u: u, b: b}
	if d.GatherParams == nil {
		// one rank: the shard is the whole model
		err = d.s.CopyAsync(b.Ptr, d.ParamShard()+uintptr(4*(u.Lo-d.cfg.Shard.Lo)), 4*(u.Hi-u.Lo), cuda.DeviceToDevice)
	} else {
		var after *cuda.Event
		if after, err = d.mark(); err == nil {
			g.wait, err = d.GatherParams(u.Lo, u.Hi, b.Ptr, after)
		}
	}
	if err != nil {
		d.drop(b)
		return nil, fmt.Errorf("devmodel: %s: gathering the parameters [%d, %d): %w", d.Host.Name, u.Lo, u.Hi, err)
	}
	return g, nil
}

// use waits until g's block holds its unit's parameters and points
// Params at it.
func (d *Model) use(g *gathered) error {
	if g == nil {
		return nil
	}
	if g.wait != nil {
		if err := g.wait(); err != nil {
			return fmt.Errorf("devmodel: %s: gathering the parameters [%d, %d): %w", d.Host.Name, g.u.Lo, g.u.Hi, err)
		}
		g.wait = nil
	}
	d.Params = g.b.Ptr - uintptr(4*g.u.Lo)
	return nil
}

// ungather points Params back at the shard and releases g's block; a
// gather still under way (an error stopped the step) keeps its block
// out of use.
func (d *Model) ungather(g *gathered) {
	if g == nil {
		return
	}
	d.Params = d.paramBase
	if g.wait != nil {
		d.drop(g.b)
	}
}

// drop gives up b's region (left held until Close, never reused):
// something may still write b.
func (d *Model) drop(b *unitBlock) { d.umem.abandoned = true }

// withParams runs run for each unit of order with its parameters
// gathered (ZeRO-3; without ShardParams, run alone): the gather of the
// next unit starts before this unit's ops are queued, so that it
// overlaps them (a prefetch: two units' parameter blocks are held at
// once), and is waited for before the next unit's are.
func (d *Model) withParams(order []Unit, at []uintptr, run func(u Unit) error) (err error) {
	var next *gathered
	defer func() { d.ungather(next) }()
	if len(order) > 0 {
		if next, err = d.startGather(order[0], at); err != nil {
			return err
		}
	}
	for k, u := range order {
		cur := next
		next = nil
		if err := d.use(cur); err != nil {
			d.ungather(cur)
			return err
		}
		if k+1 < len(order) {
			if next, err = d.startGather(order[k+1], at); err != nil {
				d.ungather(cur)
				return err
			}
		}
		err := run(u)
		d.ungather(cur)
		if err != nil {
			return err
		}
	}
	return nil
}

// ParamShard is the device address of this rank's shard of the
// parameters (Shard.Len() float32s, the shard's first value first),
// wherever Params points during a step.
func (d *Model) ParamShard() uintptr {
	if d.full != 0 {
		return d.full + uintptr(4*d.cfg.Shard.Lo)
	}
	return d.paramBase + uintptr(4*d.cfg.Shard.Lo)
}

// GradShard is the device address of this rank's shard of the gradients.
func (d *Model) GradShard() uintptr { return d.gradBase + uintptr(4*d.cfg.Shard.Lo) }

// pendingGrads is a unit's gradient block under reduction.
type pendingGrads struct {
	u    Unit
	b    *unitBlock
	wait func() error
}

// finish waits for a unit's reduction, adds this rank's part of it into
// the shard's gradients and gives the block back.
func (d *Model) finish(pg *pendingGrads) error {
	if pg == nil || pg.b == nil {
		return nil
	}
	if pg.wait != nil {
		if err := pg.wait(); err != nil {
			d.drop(pg.b) // the reduction may still read it
			return err
		}
	}
	sh := d.cfg.Shard
	lo, hi := max(pg.u.Lo, sh.Lo), min(pg.u.Hi, sh.Hi)
	if lo >= hi {
		return nil
	}
	g := d.GradShard() + uintptr(4*(lo-sh.Lo))
	return d.k.Add(d.s, g, g, pg.b.Ptr+uintptr(4*(lo-pg.u.Lo)), hi-lo)
}

// forwardSharded runs p's forward ops, unit by unit (first unit first),
// gathering each unit's parameters (ZeRO-3). f picks the op's function.
func (d *Model) forwardSharded(p *plan, f func(o op) func() error, what string) error {
	um, err := d.unitBlocks(p)
	if err != nil {
		return err
	}
	us := d.units(p)
	order := make([]Unit, len(us))
	for k, u := range us {
		order[len(us)-1-k] = u
	}
	return d.withParams(order, um.fwd, func(u Unit) error {
		for i := u.first; i <= u.last; i++ {
			if fn := f(p.ops[i]); fn != nil {
				if err := fn(); err != nil {
					return fmt.Errorf("devmodel: %s: layer %s %s: %w", d.Host.Name, p.ops[i].name, what, err)
				}
			}
		}
		return nil
	})
}

// backwardSharded runs p's backward ops unit by unit (last first), each
// unit's gradients into a block of their own, reduced by ReduceGrads and
// added into the shard (see the top of this file).
func (d *Model) backwardSharded(p *plan) (err error) {
	var pending *pendingGrads
	defer func() {
		if ferr := d.finish(pending); ferr != nil && err == nil {
			err = ferr
		}
		d.Grads = d.gradBase
	}()
	um, err := d.unitBlocks(p)
	if err != nil {
		return err
	}
	return d.withParams(d.units(p), um.bwd, func(u Unit) error {
		if u.Hi <= u.Lo {
			return d.backwardOps(p, u)
		}
		gb := &unitBlock{um.gr[u.k], 4 * (u.Hi - u.Lo)}
		if err := d.memset(gb.Ptr, 4*(u.Hi-u.Lo)); err != nil {
			return err
		}
		d.Grads = gb.Ptr - uintptr(4*u.Lo)
		err := d.backwardOps(p, u)
		d.Grads = d.gradBase
		if err != nil {
			return err
		}
		next := &pendingGrads{u: u, b: gb}
		if d.ReduceGrads != nil {
			after, err := d.mark()
			if err != nil {
				d.drop(gb)
				return err
			}
			if next.wait, err = d.ReduceGrads(u.Lo, u.Hi, gb.Ptr, after); err != nil {
				d.drop(gb)
				return fmt.Errorf("devmodel: %s: reducing the gradients [%d, %d): %w", d.Host.Name, u.Lo, u.Hi, err)
			}
		}
		prev := pending
		pending = next
		return d.finish(prev)
	})
}

// backwardOps queues u's backward ops.
func (d *Model) backwardOps(p *plan, u Unit) error {
	for i := u.last; i >= u.first; i-- {
		if o := p.ops[i]; o.bwd != nil {
			if err := o.bwd(); err != nil {
				return fmt.Errorf("devmodel: %s: layer %s backward: %w", d.Host.Name, o.name, err)
			}
		}
	}
	return nil
}

// Unshard gathers the whole parameter buffer (ZeRO-3, for Eval and the
// like): it copies this rank's shard down, frees the shard's buffer,
// allocates N float32s, copies the shard up into its place and calls
// fill with the buffer's address to fill in the other ranks' shards (an
// all-gather in place; the model's stream is synchronized first); Params
// then point at the whole buffer until Reshard. The shard goes through
// host memory so that the two buffers are never held at once. Without
// Config.ShardParams, or when already whole, it does nothing.
//
// When the whole buffer cannot be had (out of device memory), the shard
// is put back from its host copy (a buffer of the size just freed) and
// the error names the model, device, shard and bytes asked: the model
// is as before the call (its values; the shard's address may differ),
// and training, CopyToHost or a later Unshard go on as if it had not
// been called. When fill fails, the whole buffer is left held until
// Close (a collective may still write it) and the shard put back alike.
// Should the shard's own memory not be had back either (another
// allocation took it meanwhile), its values stay in host memory: the
// error says so, ForwardBackward, Eval and Update refuse until Reshard
// puts them back, CopyToHost and CopyFromHost use the host copy
// (TestUnshardOutOfMemory).
func (d *Model) Unshard(fill func(full uintptr) error) error {
	if !d.paramsSharded() || d.parked != nil {
		if d.parked != nil {
			return d.parkedErr()
		}
		return nil
	}
	host, err := d.paramShardToHost()
	if err != nil {
		return err
	}
	d.freeUnits() // no unit is gathered while whole
	d.free(d.ParamShard(), d.shardBytes())
	bytes := 4 * max(d.N, 1)
	full, err := d.malloc(bytes)
	if err != nil {
		err = fmt.Errorf("devmodel: %s: Unshard: %d bytes for the whole parameter buffer: %w", d.where(), bytes, err)
		return d.unpark(host, err)
	}
	d.full, d.Params = full, full
	if err := cuda.CopyHtoD(d.dev, d.ParamShard(), bytesOf(host)); err != nil {
		return d.backToShard(host, false, err)
	}
	if err := d.afterLegacy(); err != nil {
		return d.backToShard(host, false, err)
	}
	if fill != nil {
		if err := fill(full); err != nil {
			return d.backToShard(host, true, fmt.Errorf("devmodel: %s: gathering the parameters: %w", d.where(), err))
		}
	}
	return nil
}

// where names the model, its device and its shard (the rank's) in
// Unshard's and Reshard's errors.
func (d *Model) where() string {
	return fmt.Sprintf("%s (device %d, shard [%d, %d))", d.Host.Name, d.dev, d.cfg.Shard.Lo, d.cfg.Shard.Hi)
}

// shardBytes is the size of the shard's parameter buffer (ZeRO-3).
func (d *Model) shardBytes() int { return 4 * max(d.cfg.Shard.Len(), 1) }

// backToShard undoes an Unshard that failed (cause) once the whole
// buffer was allocated: the buffer is freed, or left held until Close
// when a collective may still write it (held), and the shard put back
// from host.
func (d *Model) backToShard(host []float32, held bool, cause error) error {
	if !held {
		d.free(d.full, 4*max(d.N, 1))
	}
	d.full = 0
	return d.unpark(host, cause)
}

// unpark puts the shard's values (host) back in a buffer of its own and
// points Params at it; cause (nil: none) is the failure that brought
// them to the host, returned with, should the buffer not be had, the
// values left parked in host memory (parkedErr) for Reshard to put back.
func (d *Model) unpark(host []float32, cause error) error {
	sh := d.cfg.Shard
	d.parked, d.paramBase, d.Params = host, 0, 0
	p, err := d.malloc(d.shardBytes())
	if err != nil {
		err = fmt.Errorf("devmodel: %s: %d bytes for the parameters' shard: %w; its values are kept in host memory until Reshard puts them back (ForwardBackward, Eval and Update refuse until then)", d.where(), d.shardBytes(), err)
		if cause != nil {
			return fmt.Errorf("%w; then %w", cause, err)
		}
		return err
	}
	d.paramBase = p - uintptr(4*sh.Lo)
	d.Params = d.paramBase
	if err := cuda.CopyHtoD(d.dev, p, bytesOf(host)); err != nil {
		d.free(p, d.shardBytes())
		d.paramBase, d.Params = 0, 0
		err = fmt.Errorf("devmodel: %s: putting the parameters' shard back: %w; its values are kept in host memory until Reshard puts them back", d.where(), err)
		if cause != nil {
			return fmt.Errorf("%w; then %w", cause, err)
		}
		return err
	}
	d.parked = nil
	d.ParamsChanged()
	if err := d.afterLegacy(); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// parkedErr is the error of a model whose shard of the parameters is
// parked in host memory (see Unshard), nil if it is not.
func (d *Model) parkedErr() error {
	if d.parked == nil {
		return nil
	}
	return fmt.Errorf("devmodel: %s: the parameters' shard is in host memory after a failed allocation: call Reshard to put it back on the device", d.where())
}

// paramShardDown copies this rank's shard of the parameters into dst
// (Shard.Len() values) once the model's queued work is done: from the
// device, or from host memory where it is parked.
func (d *Model) paramShardDown(dst []float32) error {
	if d.parked != nil {
		copy(dst, d.parked)
		return nil
	}
	if err := d.s.Synchronize(); err != nil {
		return err
	}
	return cuda.CopyDtoH(d.dev, bytesOf(dst), d.ParamShard())
}

// paramShardUp copies src (Shard.Len() values) into this rank's shard
// of the parameters: on the device, or into host memory where it is
// parked (Reshard puts it up).
func (d *Model) paramShardUp(src []float32) error {
	if d.parked != nil {
		copy(d.parked, src)
		return nil
	}
	return cuda.CopyHtoD(d.dev, d.ParamShard(), bytesOf(src))
}

// paramShardToHost copies this rank's shard of the parameters down, once
// the model's queued work is done (Unshard, Reshard).
func (d *Model) paramShardToHost() ([]float32, error) {
	host := make([]float32, d.cfg.Shard.Len())
	return host, d.paramShardDown(host)
}

// Reshard keeps this rank's shard of the parameters Unshard gathered and
// frees the whole buffer (the shard through host memory again). Should
// the shard's buffer not be had (another allocation took the memory
// freed), the shard's values stay in host memory, as when Unshard fails
// so: the error says so, and Reshard, called again, puts them back.
func (d *Model) Reshard() error {
	if d.parked != nil {
		return d.unpark(d.parked, nil)
	}
	if d.full == 0 {
		return nil
	}
	host, err := d.paramShardToHost()
	if err != nil {
		return err
	}
	return d.backToShard(host, false, nil)
}

// mark records the model's scratch event at the current end of its
// stream, for GatherParams and ReduceGrads (which must wait for it on
// the device before they return: it is recorded again for the next).
func (d *Model) mark() (*cuda.Event, error) {
	if d.unitEv == nil {
		ev, err := cuda.NewEvent(d.dev)
		if err != nil {
			return nil, err
		}
		d.unitEv = ev
	}
	return d.unitEv, d.unitEv.Record(d.s)
}

// closeUnits destroys mark's event (Close).
func (d *Model) closeUnits() {
	if d.unitEv != nil {
		d.unitEv.Destroy()
		d.unitEv = nil
	}
}

// free frees placement memory from malloc (the stream synchronized: no
// work of the model's may use it).
func (d *Model) free(p uintptr, n int) {
	d.s.Synchronize()
	for i, q := range d.owned {
		if q == p {
			d.owned = append(d.owned[:i], d.owned[i+1:]...)
			cuda.Free(d.dev, p)
			d.fixed -= int64(n)
			return
		}
	}
}
