package devmodel

import (
	"fmt"
	"sort"
	"strings"
	"syscall"
	"unsafe"

	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/nn"
)

// A training plan's memory (a Model's, and each of a Stage's: laidOut).
//
// The plan's buffers are laid out at compile time in one region of
// device memory, allocated with its exact size (cudaMalloc, counted in
// PeakBytes) and kept for the model's life: a later plan (another batch
// size) reuses it where it fits, else it is allocated again larger. The
// plan used to take one pool block per buffer, each a power of two: at
// GPT-2 small's batch 8 a (N, T, C) activation of 25.2 MB took 33.6 MB,
// a (N, T, 3C) one 134 MB for 75.5 MB, attention's probabilities 537 MB
// for 403 MB; 7.0 GB of 25.2 GB rounded away. A Stage's plans (one a
// micro-batch size, each holding its micro-batch's activations while
// the others run) have a region each, kept for the stage's life; its
// input and output and their gradients, which go in and out between
// the ops, live the whole step (TestStageSharedPlanSameBits: the same
// bits as pool blocks, each stage's peak lower by the blocks' bytes
// less the regions').
//
// The layout follows each buffer's life over a step: time runs through
// the n ops' forward passes (op i at time i), the loss (n) and their
// backward passes in reverse (op i at 2n - i). Two buffers share memory
// where their lives do not meet (greedy, the largest first, each at the
// lowest offset free for its life; 256-byte aligned as the pool's
// blocks). The ops run in order on one stream, so a reuse is ordered
// after the last use. A buffer lives the whole step unless the compile
// learns otherwise (memPlan.consumed, at a Sequential's child and a
// Residual's sum, when the act's last reader has been planned; a
// buffer's first user is taken to be the op planned before it is
// allocated, which may do the layer's work: fuse.go):
//
//   - an activation's gradient lives in the backward pass only, from the
//     backward of its last reader (which writes it) to that of its
//     producer (which reads it): time 2n - hi to 2n - lo, for the ops lo
//     to hi that use it (a Residual's first op reads its output's
//     gradient: memPlan.touch);
//   - an activation's values live in the forward pass only (time lo to
//     hi) where no backward reads them: neither its producer's (ReLU's,
//     Tanh's, and attention's own qkv and output, which are never handed
//     on, keep theirs) nor its reader's (readsInput: a Linear, a
//     convolution, attention, GELU and an Embedding read their input in
//     backward; a LayerNorm, batch norm, ReLU, Tanh, max pooling,
//     Dropout, a PositionEmbedding and a Residual's sum do not; a view,
//     Flatten or a Dropout of 0, is read as its reader reads it: a
//     Sequential or a Residual's function that starts with one reads
//     its input as the first layer after the views does,
//     TestSharedPlanSameBits/views);
//   - a bf16 copy of a gradient (grad16) lives as the gradient;
//   - under bf16 autocast with the producers' copies (copy16), a
//     LayerNorm's or GELU's output (BiasGELU's too) that only a Linear's
//     bf16 products read (its forward and weight gradient, through the
//     copy; attention's in-projection among them) keeps no fp32 value
//     (copyOnly): its kernel writes the bf16 copy alone, and its address
//     is a key the engine serves the copy for, in address space reserved
//     without memory (keyRange), never a device buffer's; a value that
//     anything else reads (a Residual's sum, a layer without products,
//     the loss) or whose producer's backward reads it (ReLU) is kept
//     (TestCopyOnlyValues; GPT-2 small at batch 8: 1.84 GB less); a
//     Stage's plan likewise (keepCopiesOnly), its input and output kept
//     (TestStageCopyOnly; GPT-2 small in 2 stages: 0.91 and 0.93 GB less
//     a stage, TestStageMemoryGPT2SmallBF16);
//   - attention's qkv and output gradients live in its backward only,
//     its workspace (the score gradients dS, with the heads in place or
//     fused) from the last attention's backward to the first's.
//
// The values are the same bits: the same kernels on the same values,
// only where they are kept differs (TestSharedPlanSameBits against the
// pool blocks; TestGPTMatchesCPU and the rest). MemoryPlan lays a plan
// out without a device and says where the bytes go (MemoryBreakdown).
//
// Not done, measured by MemoryPlan at GPT-2 small's batch 8: saved
// activations dying at their producer's backward (time 2n - lo), so that
// the backward's gradients reuse later layers' dead ones, saves 50 MB
// (the busiest moment is the last layer's backward, when none is dead
// yet).

// planRegion switches the region (off: each buffer a pool block of its
// own, a power of two, held the whole step, as before: the path
// TestSharedPlanSameBits compares with, where the fake CUDA checks each
// buffer's bounds).
var planRegion = true

// memRole is what a plan buffer holds.
type memRole string

const (
	roleValue   memRole = "values"
	roleGrad    memRole = "gradients"
	roleSaved   memRole = "saved for backward" // a layer's own (LayerNorm's xhat and 1/std, batch norm's xhat, attention's P)
	roleCopy    memRole = "bf16 copies"
	roleGrad16  memRole = "bf16 gradient copies"
	roleWS      memRole = "workspace"
	roleBatch   memRole = "batch and loss"
	roleScratch memRole = "layer scratch"
	// values that only bf16 products read, kept as their copy alone (no
	// memory: copyOnly)
	roleNotKept memRole = "values (bf16 copy only)"
)

// memBuf is a buffer of the plan being recorded.
type memBuf struct {
	bytes       int // aligned
	role        memRole
	layer, kind string // where it was allocated: the layer's name and type
	shape       []int  // an activation's, else nil
	lo, hi      int    // ops that use it
	scoped      bool   // a gradient whose users are known: backward only
	dropped     bool   // a value whose readers are known
	saved       bool   // read in backward by a reader
	outFree     bool   // its producer's backward does not read it
	pinned      bool   // held the whole step whatever else is known
	link        int    // lives as buffer link (grad16: its gradient's); -1 none
	keyOnly     bool   // values read as their bf16 copy only: a key, not in the region (copyOnly)
	off         int    // laid out: its offset
	start, end  int    // laid out: its life (time)
	whole       bool   // laid out: the whole step
}

// memPlan records a training plan's buffers (the compile's first pass)
// and lays them out; the second pass places each at its offset from
// base, in the same order.
type memPlan struct {
	bufs   []memBuf
	byAddr map[uintptr]int
	ops    int
	top    int
	// placing: the second pass, at base
	placing bool
	base    uintptr
	next    int
	// keys: the keyOnly buffers' addresses, keyBytes from keyBase (a
	// keyRange's), each at its off
	keyBase  uintptr
	keyBytes int
}

// recBase is where the first pass's made-up addresses start (never 0).
const recBase = uintptr(1) << 40

func newMemPlan() *memPlan { return &memPlan{byAddr: map[uintptr]int{}} }

// alloc records (first pass) or places (second pass) the next buffer.
func (mp *memPlan) alloc(c *compiler, role memRole, shape []int, n int) (uintptr, error) {
	n = (max(n, 1) + arenaAlign - 1) / arenaAlign * arenaAlign
	if mp.placing {
		if mp.next >= len(mp.bufs) || mp.bufs[mp.next].bytes != n {
			return 0, fmt.Errorf("internal: the plan's second pass asked for buffer %d of %d bytes; the first laid out %d buffers", mp.next, n, len(mp.bufs))
		}
		b := mp.bufs[mp.next]
		mp.next++
		if b.keyOnly {
			return mp.keyBase + uintptr(b.off), nil
		}
		return mp.base + uintptr(b.off), nil
	}
	// the op planned last may do the layer's work (fuse.go: a GELU or a
	// Residual's sum in the Linear's op): it counts as a user
	i, at := len(mp.bufs), max(len(c.p.ops)-1, 0)
	b := memBuf{bytes: n, role: role, layer: c.where, kind: c.whereKind, shape: shape, lo: at, hi: at, link: -1, outFree: outFree(c.whereLayer)}
	mp.bufs = append(mp.bufs, b)
	addr := recBase + uintptr(i)*arenaAlign
	mp.byAddr[addr] = i
	return addr, nil
}

func (mp *memPlan) recording() bool { return mp != nil && !mp.placing }

// buf is the recorded buffer at addr (nil: none, or not recording).
func (mp *memPlan) buf(addr uintptr) *memBuf {
	if !mp.recording() || addr == 0 {
		return nil
	}
	if i, ok := mp.byAddr[addr]; ok {
		return &mp.bufs[i]
	}
	return nil
}

// consumed notes that a's readers have all been planned (ops up to
// ops-1), by is the one that read it (nil: one that reads it in forward
// only).
func (mp *memPlan) consumed(a *act, by nn.Layer, ops int) {
	if !mp.recording() || a == nil {
		return
	}
	if b := mp.buf(a.val); b != nil {
		b.hi, b.dropped = max(b.hi, ops-1), true
		if by != nil && readsInput(by) {
			b.saved = true
		}
	}
	if b := mp.buf(a.grad); b != nil {
		b.hi, b.scoped = max(b.hi, ops-1), true
	}
}

// touch notes that op uses the buffer at addr.
func (mp *memPlan) touch(addr uintptr, op int) {
	if b := mp.buf(addr); mp.recording() && b != nil {
		b.lo, b.hi = min(b.lo, op), max(b.hi, op)
	}
}

// backwardOnly makes the buffers at addrs gradients used by ops lo to hi
// only.
func (mp *memPlan) backwardOnly(lo, hi int, addrs ...uintptr) {
	for _, a := range addrs {
		if b := mp.buf(a); mp.recording() && b != nil {
			b.lo, b.hi, b.scoped = min(b.lo, lo), max(b.hi, hi), true
		}
	}
}

// copyOnly makes the values at addr, which only bf16 products read
// (through the copy their producer writes: copy16), a key: an address
// the engine serves the copy for (gemm.Engine.Provide) and no device
// buffer has, so that a value or operand elsewhere can never be taken
// for it; no memory of the region holds them (the producer writes the
// copy alone: compiler.val32).
func (mp *memPlan) copyOnly(addr uintptr) {
	if b := mp.buf(addr); mp.recording() && b != nil && b.role == roleValue && !b.pinned {
		b.keyOnly = true
	}
}

// copyOnlyValues switches keepCopiesOnly (off: every fp32 value kept
// beside its copy, the layout the tests compare with).
var copyOnlyValues = true

// keepCopiesOnly makes copyOnly each output of the plan just walked
// whose producer can write its bf16 copy alone (compiler.only16) and
// that only bf16 products read (through the copy: none of its readers
// set plain), in a Model's training plan and a Stage's alike (one place
// for both). A pinned buffer is never one (copyOnly): the batch, the
// logits, and a stage's input and output, which come from and go to the
// neighbouring stages in fp32 outside the ops; call it after pin.
func (c *compiler) keepCopiesOnly() {
	if !copyOnlyValues {
		return
	}
	for _, a := range c.only16 {
		if a.to16 != nil && *a.to16 != 0 && !a.plain {
			c.mem.copyOnly(a.val)
		}
	}
}

// keyed is whether addr, in the plan being placed, is a key (copyOnly).
func (mp *memPlan) keyed(addr uintptr) bool {
	return mp != nil && mp.placing && mp.keyBytes > 0 && addr >= mp.keyBase && addr < mp.keyBase+uintptr(mp.keyBytes)
}

// linked makes the buffer at addr live as the one at to.
func (mp *memPlan) linked(addr, to uintptr) {
	if !mp.recording() {
		return
	}
	if i, ok := mp.byAddr[to]; ok {
		if b := mp.buf(addr); b != nil {
			b.link = i
		}
	}
}

// pin holds the buffers at addrs the whole step (the plan's input,
// output and its gradient, which work outside the ops uses).
func (mp *memPlan) pin(addrs ...uintptr) {
	for _, a := range addrs {
		if b := mp.buf(a); mp.recording() && b != nil {
			b.pinned = true
		}
	}
}

// readsInput is whether l's backward reads its input's values.
func readsInput(l nn.Layer) bool {
	switch l := l.(type) {
	case *nn.LayerNorm, *nn.BatchNorm, nn.ReLU, *nn.ReLU, nn.Tanh, *nn.Tanh, nn.MaxPool2d, *nn.MaxPool2d, *nn.PositionEmbedding:
		return false
	case *nn.Dropout:
		return view(l) // of 0, the identity: a view, read as its reader reads it
	case *nn.Residual:
		return readsInput(l.Fn) // the sum reads it in forward only
	case *nn.Sequential:
		// its first layer that is not a view of its input (a view's
		// reader reads the input: a Sequential does not note it as read
		// by the layers inside)
		for _, c := range l.Layers {
			if !view(c) {
				return readsInput(c)
			}
		}
		return true
	}
	return true // Linear, Conv2d, CausalSelfAttention, GELU, Embedding; a view (Flatten); anything else
}

// view is whether l in a training plan is a view of its input (its
// output the input's memory): Flatten, a Dropout of 0, a Sequential of
// views.
func view(l nn.Layer) bool {
	switch l := l.(type) {
	case nn.Flatten, *nn.Flatten:
		return true
	case *nn.Dropout:
		return l.P == 0
	case *nn.Sequential:
		for _, c := range l.Layers {
			if !view(c) {
				return false
			}
		}
		return true
	}
	return false
}

// outFree is whether l's backward does not read the values of the
// activations it allocates and hands on (its output; ReLU and Tanh read
// theirs).
func outFree(l nn.Layer) bool {
	switch l.(type) {
	case nil, nn.ReLU, *nn.ReLU, nn.Tanh, *nn.Tanh:
		return false
	}
	return true
}

// layout gives each recorded buffer its life and offset and sets top,
// the region's size.
func (mp *memPlan) layout(ops int) {
	mp.ops = ops
	n := ops
	life := func(b *memBuf) (int, int, bool) {
		switch {
		case b.pinned:
			return 0, 0, true
		case (b.role == roleGrad || b.role == roleGrad16 || b.role == roleWS) && b.scoped:
			return 2*n - b.hi, 2*n - b.lo, false
		case b.role == roleValue && b.dropped && !b.saved && b.outFree:
			return b.lo, b.hi, false
		}
		return 0, 0, true
	}
	mp.keyBytes = 0
	for i := range mp.bufs {
		b := &mp.bufs[i]
		b.start, b.end, b.whole = life(b)
		if b.keyOnly { // its own key, for the plan's life
			b.off, b.start, b.end, b.whole = mp.keyBytes, 0, 2*n, false
			mp.keyBytes += b.bytes
		}
	}
	for i := range mp.bufs {
		if b := &mp.bufs[i]; b.link >= 0 {
			l := mp.bufs[b.link]
			b.start, b.end, b.whole = l.start, l.end, l.whole || b.pinned
		}
	}
	mp.top = pack(mp.bufs)
}

// pack gives each of bufs, whose lives (start, end, whole) are set, its
// offset and returns the region's size: the whole step's buffers first,
// in order; then the rest, largest first, each at the lowest offset
// clear of those whose lives meet its own.
func pack(bufs []memBuf) int {
	top := 0
	var rest []int
	for i := range bufs {
		if b := &bufs[i]; b.keyOnly {
			continue // not in the region
		} else if b.whole {
			b.off, top = top, top+b.bytes
		} else {
			rest = append(rest, i)
		}
	}
	base := top
	sort.SliceStable(rest, func(x, y int) bool { return bufs[rest[x]].bytes > bufs[rest[y]].bytes })
	var placed []int
	for _, i := range rest {
		b := &bufs[i]
		var busy [][2]int
		for _, j := range placed {
			o := bufs[j]
			if o.start <= b.end && b.start <= o.end {
				busy = append(busy, [2]int{o.off, o.off + o.bytes})
			}
		}
		sort.Slice(busy, func(x, y int) bool { return busy[x][0] < busy[y][0] })
		off := base
		for _, r := range busy {
			if off+b.bytes <= r[0] {
				break
			}
			off = max(off, r[1])
		}
		b.off = off
		top = max(top, off+b.bytes)
		placed = append(placed, i)
	}
	return top
}

// MemoryBreakdown is where a model's device memory goes in training at
// a batch size (MemoryBreakdown; Model.Memory).
type MemoryBreakdown struct {
	// Fixed is the placement's buffers by name (parameters, gradients,
	// optimizer state, ...), bytes.
	Fixed map[string]int64
	// Plan is the training plan's region (its laid-out size; Memory's:
	// the region held, which a larger batch's plan may have made
	// larger), and PlanUnshared the sum of its buffers (what it would be
	// without sharing).
	Plan, PlanUnshared int64
	// Buffers are the plan's buffers in the order the compile asks for
	// them.
	Buffers []MemoryBuffer
	// Peak is Fixed's sum plus Plan (Model.Memory's: PeakBytes after a
	// training step; MemoryPlan's less the matrix products' scratch,
	// which is known at run time only).
	Peak int64
}

// MemoryBuffer is one buffer of a training plan.
type MemoryBuffer struct {
	Layer, Kind string // the layer that allocates it: name (PyTorch prefix) and Go type
	Role        string // values, gradients, saved for backward, bf16 copies, ...
	Shape       []int  // an activation's shape, else nil
	// Bytes is its size, 256-byte aligned; of Role "values (bf16 copy
	// only)", the fp32 values no memory holds (their readers, bf16
	// products, read the bf16 copy): what they would take, not in the
	// region (Offset -1), nor in the table's sums or PlanUnshared
	Bytes  int64
	Offset int64 // in the region
	// Start and End are its life: time t is op t's forward for t < Ops,
	// the loss at Ops, op 2 Ops - t's backward after; Whole: the whole
	// step.
	Start, End int
	Whole      bool
}

// Totals sums the plan's buffers by role (that of the values kept as
// bf16 copies only, "values (bf16 copy only)", is bytes not held).
func (b MemoryBreakdown) Totals() map[string]int64 {
	t := map[string]int64{}
	for _, x := range b.Buffers {
		t[x.Role] += x.Bytes
	}
	return t
}

// String is a table: the fixed buffers, then the plan's by kind of layer
// and role (count, bytes held the whole step, bytes that share).
func (b MemoryBreakdown) String() string {
	var s strings.Builder
	gb := func(n int64) string {
		switch {
		case n >= 1e9:
			return fmt.Sprintf("%8.3f GB", float64(n)/1e9)
		case n >= 1e6:
			return fmt.Sprintf("%8.3f MB", float64(n)/1e6)
		}
		return fmt.Sprintf("%8.3f kB", float64(n)/1e3)
	}
	keys := make([]string, 0, len(b.Fixed))
	for k := range b.Fixed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var fixed int64
	for _, k := range keys {
		fmt.Fprintf(&s, "  fixed %-38s %s\n", k, gb(b.Fixed[k]))
		fixed += b.Fixed[k]
	}
	type key struct{ kind, role string }
	type sum struct {
		n            int
		whole, share int64
	}
	by := map[key]*sum{}
	var ks []key
	for _, x := range b.Buffers {
		k := key{x.Kind, x.Role}
		if by[k] == nil {
			by[k] = &sum{}
			ks = append(ks, k)
		}
		by[k].n++
		if x.Role == string(roleNotKept) {
			continue // not held
		}
		if x.Whole {
			by[k].whole += x.Bytes
		} else {
			by[k].share += x.Bytes
		}
	}
	sort.SliceStable(ks, func(i, j int) bool {
		a, c := by[ks[i]], by[ks[j]]
		return a.whole+a.share > c.whole+c.share
	})
	fmt.Fprintf(&s, "  %-20s %-22s %5s %11s %11s\n", "plan: layer", "role", "bufs", "whole step", "shared")
	for _, k := range ks {
		fmt.Fprintf(&s, "  %-20s %-22s %5d %s %s\n", k.kind, k.role, by[k].n, gb(by[k].whole), gb(by[k].share))
	}
	fmt.Fprintf(&s, "  fixed %s + plan region %s (its buffers unshared %s) = %s\n", gb(fixed), gb(b.Plan), gb(b.PlanUnshared), gb(b.Peak))
	return s.String()
}

// breakdown makes mp's MemoryBreakdown with fixed.
func (mp *memPlan) breakdown(fixed map[string]int64) MemoryBreakdown {
	b := MemoryBreakdown{Fixed: fixed, Plan: int64(mp.top)}
	for _, x := range mp.bufs {
		role, off := x.role, int64(x.off)
		if x.keyOnly {
			role, off = roleNotKept, -1
		} else {
			b.PlanUnshared += int64(x.bytes)
		}
		b.Buffers = append(b.Buffers, MemoryBuffer{Layer: x.layer, Kind: x.kind, Role: string(role), Shape: x.shape,
			Bytes: int64(x.bytes), Offset: off, Start: x.start, End: x.end, Whole: x.whole})
	}
	b.Peak = b.Plan
	for _, v := range fixed {
		b.Peak += v
	}
	return b
}

// fixedBytes is what Place allocates beside the plan (as Place does):
// parameters, gradients, the optimizer's state, the clipping workspace,
// batch norm's running statistics.
func fixedBytes(m *nn.Model, cfg Config) map[string]int64 {
	n := int64(max(len(m.Flat.Value), 1))
	f := map[string]int64{"parameters": 4 * n, "gradients": 4 * n}
	if st := optimStateBytes(n, cfg); st > 0 {
		f["optimizer state"] = st
	}
	if cfg.ClipGrad > 0 {
		f["clipping workspace"] = kernels.ClipWorkspace + 8*int64(normCap) // and the norms' log (clipsInUpdate)
	}
	var bn int64
	for _, b := range m.BNs {
		bn += 8 * int64(b.C)
	}
	if bn > 0 {
		f["batch norm statistics"] = bn
	}
	return f
}

// optimStateBytes is the optimizer state's bytes for n values (Adam's
// two moments, SGD's momentum buffer, if any).
func optimStateBytes(n int64, cfg Config) int64 {
	switch opt := withDefaults(cfg.Optim); {
	case opt.Name != "sgd":
		return 8 * n
	case opt.Momentum != 0:
		return 4 * n
	}
	return 0
}

// defaultEngine is what a plan without a device takes the engine to be
// (MemoryPlan's, StageMemoryPlan's): a GPU's default.
func defaultEngine(cfg Config) *dryEngine {
	return &dryEngine{copies: cfg.Precision == gemm.BF16 && producerCopies, inPlace: true}
}

// MemoryPlan lays out m's training plan at batch samples as Place with
// cfg would (cfg.Batch is ignored; no ZeRO sharding), without a device,
// and says where the bytes go. It takes the engine to be a GPU's
// default: cuBLAS with gdist's cast kernel (under Config.Precision
// "bf16" the products read the producers' bf16 copies:
// gemm.Engine.UsesCopies) and cublasGemmBatchedEx (attention reads the
// heads in place: kernels.AttentionInPlace); $GDIST_ATTENTION=fused as
// set.
func MemoryPlan(m *nn.Model, batch int, cfg Config) (MemoryBreakdown, error) {
	if batch < 1 {
		return MemoryBreakdown{}, fmt.Errorf("devmodel: %s: MemoryPlan at batch %d: want at least 1", m.Name, batch)
	}
	mp := newMemPlan()
	if _, err := (&Model{Host: m}).compileWith(batch, mp, defaultEngine(cfg), true); err != nil {
		return MemoryBreakdown{}, err
	}
	return mp.breakdown(fixedBytes(m, cfg)), nil
}

// Memory is where the model's device memory goes: the training plan at
// its batch size as laid out, the placement's buffers, the evaluation
// arena and the matrix products' scratch (gpu/gemm: under bf16 the
// weight cache and the operands' casts; the pointer arrays), as they are
// now: after a step at the plan's batch size its Peak is PeakBytes
// (without ZeRO's sharding).
func (d *Model) Memory() MemoryBreakdown {
	if d.plan == nil || d.plan.mem == nil {
		return MemoryBreakdown{}
	}
	f := fixedBytes(d.Host, d.cfg)
	if d.evalCap > 0 {
		f["evaluation arena"] = int64(d.evalCap)
	}
	if d.umem.size > 0 {
		f["ZeRO units' blocks"] = int64(d.umem.size) // zero.go's unitMem
	}
	named := int64(d.plan.regionBytes)
	for _, v := range f {
		named += v
	}
	if other := d.fixed - named; other != 0 { // what Place holds that fixedBytes does not name (or, sharded, less)
		f["other placement buffers"] = other
	}
	if d.h != nil && d.h.ScratchBytes() > 0 {
		f["matrix products' scratch"] = int64(d.h.ScratchBytes())
	}
	b := d.plan.mem.breakdown(f)
	if r := int64(d.plan.regionBytes); r > b.Plan { // a larger batch's region, kept
		b.Peak, b.Plan = b.Peak+r-b.Plan, r
	}
	return b
}

// laidOut compiles a training plan (a Model's or a Stage's) in its
// region: build's first pass (record) records the buffers and lays them
// out (layout), then the region is made ready (region, size: the memory
// of an earlier plan, reused where the layout fits, else freed once the
// model's work is done and allocated again at the layout's size) and
// build's second pass places the buffers in it. It returns the plan,
// which holds its region, and the region, which on an error the caller
// keeps (it may be the one given, a new one or none) or leaves to Close.
func (d *Model) laidOut(what string, region uintptr, size int, build func(mp *memPlan, record bool) (*plan, error)) (*plan, uintptr, int, error) {
	mp := newMemPlan()
	if _, err := build(mp, true); err != nil {
		return nil, region, size, err
	}
	keys, err := reserveKeys(mp.keyBytes)
	if err != nil {
		return nil, region, size, fmt.Errorf("devmodel: %s: %s: %w", d.Host.Name, what, err)
	}
	mp.keyBase = keys.base()
	if mp.top > size {
		if region != 0 {
			d.free(region, size) // after the model's work (free synchronizes)
			region, size = 0, 0
		}
		if region, err = d.malloc(mp.top); err != nil {
			keys.free()
			return nil, 0, 0, fmt.Errorf("devmodel: %s: %d bytes for %s: %w", d.Host.Name, mp.top, what, err)
		}
		size = mp.top
	}
	mp.placing, mp.base = true, region
	p, err := build(mp, false)
	if err == nil && mp.next != len(mp.bufs) {
		err = fmt.Errorf("devmodel: %s: internal: the plan's second pass placed %d of %d buffers", d.Host.Name, mp.next, len(mp.bufs))
	}
	if err != nil {
		keys.free()
		return nil, region, size, err
	}
	p.region, p.regionBytes, p.mem, p.keys = region, size, mp, keys
	return p, region, size, nil
}

// keyRange is address space reserved, with no access and no memory
// behind it, for a plan's keys (copyOnly): device memory (cudaMalloc's,
// the fake's) is mapped in the process's address space too (CUDA's
// unified addressing), so no device buffer lies in it; a kernel that
// read a key would fault rather than read another buffer.
type keyRange struct{ m []byte }

// reserveKeys reserves n bytes of keys (none, nil, for n 0).
func reserveKeys(n int) (*keyRange, error) {
	if n == 0 {
		return nil, nil
	}
	m, err := syscall.Mmap(-1, 0, n, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("%d bytes of address space for the keys of the values kept as bf16 copies only: %w", n, err)
	}
	return &keyRange{m: m}, nil
}

func (k *keyRange) base() uintptr {
	if k == nil {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(k.m)))
}

// free gives the range back (nil: nothing), once nothing can serve a
// copy for its keys (release: the engine's copies withdrawn).
func (k *keyRange) free() {
	if k != nil && k.m != nil {
		syscall.Munmap(k.m)
		k.m = nil
	}
}
