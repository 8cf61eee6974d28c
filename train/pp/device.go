package pp

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/staging"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/pipeline"
	"github.com/gdist/gdist/train/internal/closewait"
)

// The pipeline on GPUs (-device cuda): each rank's stage is a
// devmodel.Stage (its layers' parameters, gradients and optimizer state
// in device memory), run on the schedule of package pipeline (pipeline.Ops:
// GPipe or 1F1B, the same tags and message order as the CPU pipeline).
// Activations and their gradients go between the stage ranks as device
// buffers (comm.DeviceBuffer): over NCCL (-backend nccl, or auto where
// every rank has a GPU) device to device; over a host backend (shm, tcp,
// inproc) staged through pinned host memory by package comm/staging
// (staging.Adapt). The first stage uploads each batch once; the last
// uploads each micro-batch's labels and brings the step's losses down
// at its end (one copy of M floats).
//
// The host does not wait for the device between ops: the stage's work is
// queued on its stream (a non-blocking one, not ordered with the legacy
// default stream), and every hand-over is ordered by events. A buffer
// sent is written on the stream before the send is issued with a
// cuda.Order whose After event is recorded on the stream then: NCCL's
// stream waits for it on the device, comm/staging's host before it
// copies the buffer down. A receive is issued likewise (its buffer's
// last readers on the stream are done before it is written), and a
// buffer received is ready when its Work is done (NCCL: its event;
// staging: copied up from pinned memory, synchronously), which the host
// waits for before queueing the ops that read it. The batch and labels
// go up on the stream from pinned memory (below); the losses come down
// after the host waited for the stream, the step's one wait for the
// device, on the last stage. Each op is timed on
// the device by timing events (busy: the ops' device time; idle: the
// rest of the span from the step's start on the stream to its last op's
// end), read a step later so as not to wait for them, so the summary's
// busy, idle and replayed bubbles are the device's.

// runner is what the strategy needs of its stages' executor: the CPU's
// *pipeline.Pipeline or the device's *devicePipe.
type runner interface {
	Step(ctx context.Context, x []float32, y []int32) (float64, error)
	Stage() int
	Boundaries() []int
	Stats() pipeline.Stats
	MicroBatches() []int
	Ops() []pipeline.Op
	Range() (off, n int)
	Close() error
}

var (
	_ runner = (*pipeline.Pipeline)(nil)
	_ runner = (*devicePipe)(nil)
)

// devicePipe is one rank's device stage and its schedule.
type devicePipe struct {
	c             comm.Comm // the pipeline Comm, taking device buffers
	st            *devmodel.Stage
	dev           int
	stage, k      int
	batch         int
	sizes, starts []int
	ops           []pipeline.Op
	bounds        []int
	in, per       int // input floats and labels per sample
	// device buffers: the batch (stage 0); per micro-batch the received
	// input and output gradient and the sent output and input gradient;
	// the losses (last stage)
	x                          uintptr
	recvF, sendF, recvB, sendB []uintptr
	// the batch's labels on the device (the last stage); the pinned host
	// memory the batch and labels go up from, asynchronously on the
	// stream, and the event after those copies (waited for before the
	// next step writes the pinned memory again)
	y        uintptr
	hx, hy   []byte
	up       *cuda.Event
	upQueued bool
	// the After events of the step's sends and receives, by tag (a
	// receive's at tag + evRecv), each recorded once a step: the host
	// waits for every send and receive of a step before the next
	// (comm/nccl's Send and Recv launch later than they are issued);
	// legacy marks the legacy default stream (evaluation's upload)
	evs    map[int]*cuda.Event
	legacy *cuda.Event
	// the last stage's wait for a step's losses: an event with
	// cudaEventBlockingSync and a cuda.Waiter (a brief poll, then asleep:
	// cudaStreamSynchronize would spin a core for the whole step)
	lossEv   *cuda.Event
	lossWait cuda.Waiter
	losses   uintptr
	owned    []uintptr
	fixed    int64 // bytes of owned
	stats    pipeline.Stats
	// timers of the last two steps, alternately (a step's are read when
	// they are reused, two steps later, or by Stats)
	timers  [2]*opTimer
	opSteps int // steps whose op times go to stats.OpTimes
	// evaluation's device buffers by batch size: the batch (stage 0),
	// the received input, the sent output
	evalBufs map[int]*evalBufs
	// inflight are the sends and receives on the stage's buffers that a
	// failed step or evaluation left (the host waits for them all
	// otherwise): Close waits for them (quiesce)
	inflight []inflightOp
	// -clip-grad on the device (clip): direct is whether the Comm takes
	// device buffers itself (nccl; else comm/staging's copies through
	// host memory); normDone is recorded by NCCL after the all-reduce of
	// the norm's square, which the stage's stream waits for; clipOps are
	// those all-reduces not yet checked (by the next step's end, a read
	// of the norms, or Close's quiesce)
	direct   bool
	normDone *cuda.Event
	clipOps  []inflightOp
}

// inflightOp is a send or receive (what) of tag, issued.
type inflightOp struct {
	w    comm.Work
	what string
	tag  int
}

func (op inflightOp) work() comm.Work { return op.w }

func (op inflightOp) String() string {
	if op.tag < 0 { // no message's: the norm's all-reduce (evNorm)
		return op.what
	}
	return fmt.Sprintf("%s of tag %d", op.what, op.tag)
}

type evalBufs struct{ x, in, out uintptr }

// opTimer times one step's ops on the device: begin is recorded at the
// step's start, start[o] and end[o] around op o.
type opTimer struct {
	begin      *cuda.Event
	start, end []*cuda.Event
	pending    bool // recorded by a step whose times are not read yet
	keep       bool // its op times go to stats.OpTimes
	step       int
}

// newDevicePipe places stage pc.Rank() of m (layers [bounds[s],
// bounds[s+1])) on dev and allocates the step's buffers; connect then
// readies the Comm.
func newDevicePipe(ctx context.Context, pc comm.Comm, m *models.Model, bounds []int, micro int, schedule string, batch, dev int, cfg devmodel.Config) (_ *devicePipe, err error) {
	k, s := pc.Size(), pc.Rank()
	p := &devicePipe{c: pc, dev: dev, stage: s, k: k, batch: batch, bounds: append([]int(nil), bounds...),
		in: m.InputSize(), per: m.LabelsPerSample()}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if p.ops, err = pipeline.Ops(schedule, k, s, micro); err != nil {
		return nil, err
	}
	p.sizes, p.starts = pipeline.SplitBatch(batch, micro)
	cfg.Device, cfg.Batch = dev, p.sizes[0]
	if p.st, err = devmodel.PlaceStage(m, bounds[s], bounds[s+1], cfg); err != nil {
		return nil, err
	}
	alloc := func(floats int) (uintptr, error) {
		n := 4 * max(floats, 1)
		ptr, err := cuda.Malloc(dev, n)
		if err != nil {
			return 0, fmt.Errorf("pipeline: stage %d: %d bytes on cuda:%d: %w", s, n, dev, err)
		}
		p.owned = append(p.owned, ptr)
		p.fixed += int64(n)
		return ptr, nil
	}
	if s == 0 {
		if p.x, err = alloc(batch * p.in); err != nil {
			return nil, err
		}
	}
	if s == k-1 {
		if p.losses, err = alloc(micro); err != nil {
			return nil, err
		}
		if p.y, err = alloc(batch * p.per); err != nil {
			return nil, err
		}
	}
	pinned := func(floats int) ([]byte, error) {
		b, err := cuda.HostAlloc(dev, 4*max(floats, 1))
		if err != nil {
			return nil, fmt.Errorf("pipeline: stage %d: %d bytes of pinned host memory: %w", s, 4*max(floats, 1), err)
		}
		return b, nil
	}
	if s == 0 {
		if p.hx, err = pinned(batch * p.in); err != nil {
			return nil, err
		}
	}
	if s == k-1 {
		if p.hy, err = pinned(batch * p.per); err != nil {
			return nil, err
		}
	}
	if p.up, err = cuda.NewEvent(dev); err != nil {
		return nil, fmt.Errorf("pipeline: stage %d: an event on cuda:%d: %w", s, dev, err)
	}
	if p.legacy, err = cuda.NewEvent(dev); err != nil {
		return nil, fmt.Errorf("pipeline: stage %d: an event on cuda:%d: %w", s, dev, err)
	}
	if p.lossEv, err = cuda.NewBlockingEvent(dev); err != nil {
		return nil, fmt.Errorf("pipeline: stage %d: an event on cuda:%d: %w", s, dev, err)
	}
	// pair allocates an activation's buffer and its gradient's, of floats
	// each, and appends them to act and grad.
	pair := func(floats int, act, grad *[]uintptr) error {
		f, err := alloc(floats)
		if err != nil {
			return err
		}
		g, err := alloc(floats)
		if err != nil {
			return err
		}
		*act, *grad = append(*act, f), append(*grad, g)
		return nil
	}
	for j := range p.timers {
		t := &opTimer{start: make([]*cuda.Event, len(p.ops)), end: make([]*cuda.Event, len(p.ops))}
		p.timers[j] = t
		for _, e := range append([]**cuda.Event{&t.begin}, t.events()...) {
			if *e, err = cuda.NewTimingEvent(dev); err != nil {
				return nil, fmt.Errorf("pipeline: stage %d: timing events on cuda:%d: %w", s, dev, err)
			}
		}
	}
	for _, b := range p.sizes {
		if s > 0 {
			if err := pair(p.st.InSize(b), &p.recvF, &p.sendB); err != nil {
				return nil, err
			}
		}
		if s < k-1 {
			if err := pair(p.st.OutSize(b), &p.sendF, &p.recvB); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// connect sets up the Comm's per-peer resources for the stage's
// neighbours (nccl: its send/recv communicators), in an order all stages
// share, before any operation is in flight, as pipeline.New does.
func (p *devicePipe) connect(ctx context.Context) error {
	pcc, ok := p.c.(comm.PeerConnector)
	if !ok {
		return nil
	}
	var peers []int
	if p.stage > 0 {
		peers = append(peers, p.stage-1)
	}
	if p.stage < p.k-1 {
		peers = append(peers, p.stage+1)
	}
	if err := pcc.ConnectPeers(ctx, peers); err != nil {
		return fmt.Errorf("pipeline: stage %d: connecting to its neighbours: %w", p.stage, err)
	}
	return nil
}

func (p *devicePipe) Stage() int          { return p.stage }
func (p *devicePipe) Boundaries() []int   { return append([]int(nil), p.bounds...) }
func (p *devicePipe) MicroBatches() []int { return append([]int(nil), p.sizes...) }
func (p *devicePipe) Ops() []pipeline.Op  { return append([]pipeline.Op(nil), p.ops...) }
func (p *devicePipe) Range() (off, n int) { return p.st.Off, p.st.N }
func (p *devicePipe) last() bool          { return p.stage == p.k-1 }
func (p *devicePipe) peakBytes() int64    { return p.st.PeakBytes() + p.fixed }
func (p *devicePipe) buf(ptr uintptr, n int) comm.Buffer {
	return comm.DeviceBuffer(ptr, p.dev, comm.Float32, n)
}

// Stats reads the op times still pending (waiting for the device).
func (p *devicePipe) Stats() pipeline.Stats {
	a, b := p.timers[0], p.timers[1]
	if a != nil && b != nil && b.step < a.step {
		a, b = b, a
	}
	for _, t := range []*opTimer{a, b} {
		p.collect(t) // an error (the device failed) leaves the step untimed
	}
	st := p.stats
	st.OpTimes = append([][]time.Duration(nil), st.OpTimes...)
	return st
}

// track keeps w, the send or receive (what) of tag, until the step or
// evaluation that issued it succeeds.
func (p *devicePipe) track(w comm.Work, what string, tag int) {
	p.inflight = append(p.inflight, inflightOp{w, what, tag})
}

// deviceCloseWait bounds each of Close's waits for the device.
var deviceCloseWait = time.Minute

// quiesce readies the stage's device memory to be freed (Close): the
// sends and receives a failed step or evaluation left (it aborted the
// Comm: they fail soon, but a staged receive may be copying its message
// up, or NCCL's receive loop copying a message into its buffer) and the
// stage's stream must be done first. It waits for them, for
// deviceCloseWait at most; if they are not done by then it aborts the
// Comm (ending NCCL's kernels) and waits again. free is false when they
// are still not done: the memory must be leaked, not freed under them.
func (p *devicePipe) quiesce() (free bool, err error) {
	ops := append(append([]inflightOp(nil), p.inflight...), p.clipOps...)
	p.inflight, p.clipOps = nil, nil
	aborted := false
	if left := closewait.Works(ops, inflightOp.work, deviceCloseWait); len(left) > 0 {
		err = fmt.Errorf("pipeline: stage %d (cuda:%d): closing: %d send(s), receive(s) or all-reduce(s) still pending after %v (the first: %s): aborted the communicator", p.stage, p.dev, len(left), deviceCloseWait, left[0])
		comm.Abort(p.c, err)
		aborted = true
		if left = closewait.Works(left, inflightOp.work, deviceCloseWait); len(left) > 0 {
			return false, fmt.Errorf("%w; %d still pending %v after the abort: the stage's device memory is not freed", err, len(left), deviceCloseWait)
		}
	}
	if p.st == nil || p.stream() == nil {
		return true, err
	}
	abort := func(cause error) { comm.Abort(p.c, cause) }
	free, serr := closewait.Stream(p.stream(), deviceCloseWait, aborted, abort, fmt.Sprintf("pipeline: stage %d (cuda:%d)", p.stage, p.dev), "the stage's")
	return free, errors.Join(err, serr)
}

// Close frees the stage and the buffers (not the Comm), once the device
// is done with them (quiesce: bounded, aborting the Comm where it is
// not; if the device is still busy after that, nothing is freed and the
// error says so).
func (p *devicePipe) Close() error {
	free, err := p.quiesce()
	if !free {
		return err
	}
	if p.st != nil {
		err = errors.Join(err, p.st.Close())
		p.st = nil
	}
	for _, ptr := range p.owned {
		cuda.Free(p.dev, ptr)
	}
	p.owned = nil
	for _, b := range [][]byte{p.hx, p.hy} {
		if b != nil {
			cuda.FreeHost(p.dev, b)
		}
	}
	p.hx, p.hy = nil, nil
	for _, e := range append([]*cuda.Event{p.up, p.legacy, p.lossEv, p.normDone}, mapValues(p.evs)...) {
		if e != nil {
			e.Destroy()
		}
	}
	p.up, p.legacy, p.lossEv, p.normDone, p.evs = nil, nil, nil, nil, nil
	for j, t := range p.timers {
		if t != nil {
			for _, e := range append([]**cuda.Event{&t.begin}, t.events()...) {
				if *e != nil {
					(*e).Destroy()
				}
			}
		}
		p.timers[j] = nil
	}
	return err
}

func (t *opTimer) events() []**cuda.Event {
	var es []**cuda.Event
	for o := range t.start {
		es = append(es, &t.start[o], &t.end[o])
	}
	return es
}

// collect adds the op times of t's step to the stats, once its last op
// is done on the device.
func (p *devicePipe) collect(t *opTimer) error {
	if t == nil || !t.pending {
		return nil
	}
	t.pending = false
	last := t.end[len(t.end)-1]
	if err := last.Synchronize(); err != nil {
		return err
	}
	ms := func(a, b *cuda.Event) (time.Duration, error) {
		v, err := a.ElapsedMs(b)
		return time.Duration(float64(v) * float64(time.Millisecond)), err
	}
	var times []time.Duration
	if t.keep {
		times = make([]time.Duration, len(t.start))
	}
	var busy time.Duration
	for o := range t.start {
		d, err := ms(t.start[o], t.end[o])
		if err != nil {
			return err
		}
		busy += d
		if times != nil {
			times[o] = d
		}
	}
	span, err := ms(t.begin, last)
	if err != nil {
		return err
	}
	p.stats.Busy += busy
	p.stats.Idle += max(span-busy, 0)
	if times != nil {
		p.stats.OpTimes = append(p.stats.OpTimes, times)
	}
	return nil
}

// Step runs one batch through the pipeline, as pipeline.Pipeline.Step
// does: x (stage 0) and y (the last stage) are host memory; the
// parameter gradients are added to the stage's device gradients; the
// batch's mean loss is returned on every rank. On an error the Comm is
// aborted, so that no stage waits for this one.
func (p *devicePipe) Step(ctx context.Context, x []float32, y []int32) (float64, error) {
	if p.stage == 0 && len(x) != p.batch*p.in {
		return 0, fmt.Errorf("pipeline: got %d input floats, want %d", len(x), p.batch*p.in)
	}
	if p.last() && len(y) != p.batch*p.per {
		return 0, fmt.Errorf("pipeline: got %d labels for a batch of %d (%d per sample)", len(y), p.batch, p.per)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	loss, err := p.step(ctx, x, y)
	if err != nil {
		err = fmt.Errorf("pipeline: stage %d (cuda:%d): %w", p.stage, p.dev, err)
		comm.Abort(p.c, err)
		return 0, err
	}
	p.inflight = p.inflight[:0] // every one waited for
	p.stats.Steps++
	return loss, nil
}

func (p *devicePipe) step(ctx context.Context, x []float32, y []int32) (float64, error) {
	M, st, s := len(p.sizes), p.st, p.stream()
	var (
		sends    []comm.Work
		fwd, bwd = map[int]comm.Work{}, map[int]comm.Work{}
		held     = map[int]int64{}
		heldB    int64
		lastOf   = map[int]int{} // by micro-batch size: whose activations its plan holds
	)
	wait := func(w comm.Work) error { return w.Wait(ctx) }
	// The step's timing events: those of the step before last are read
	// (long done) before they are recorded again.
	tm := p.timers[p.stats.Steps%2]
	if err := p.collect(tm); err != nil {
		return 0, err
	}
	if err := tm.begin.Record(s); err != nil {
		return 0, err
	}
	if err := p.upload(x, y); err != nil {
		return 0, err
	}
	postFwd := func(i int) error {
		if p.stage == 0 || i >= M {
			return nil
		}
		octx, err := p.ordered(ctx, evRecv+tagF(i))
		if err != nil {
			return err
		}
		w, err := p.c.Recv(octx, p.buf(p.recvF[i], st.InSize(p.sizes[i])), p.stage-1, tagF(i))
		if err != nil {
			return err
		}
		p.track(w, "receive", tagF(i))
		fwd[i] = w
		return nil
	}
	send := func(ptr uintptr, n, peer, tag int) error {
		octx, err := p.ordered(ctx, tag)
		if err != nil {
			return err
		}
		w, err := p.c.Send(octx, p.buf(ptr, n), peer, tag)
		if err != nil {
			return err
		}
		p.track(w, "send", tag)
		sends = append(sends, w)
		return nil
	}
	// input is micro-batch i's input on the device: a view of the batch
	// on stage 0, else the received activation (waited for the first
	// time, when it posts the receive of the next one).
	input := func(i int, first bool) (uintptr, error) {
		if p.stage == 0 {
			return p.x + uintptr(4*p.starts[i]*p.in), nil
		}
		if first {
			w := fwd[i]
			delete(fwd, i)
			if err := wait(w); err != nil {
				return 0, err
			}
			if err := postFwd(i + 1); err != nil {
				return 0, err
			}
		}
		return p.recvF[i], nil
	}
	if err := postFwd(0); err != nil {
		return 0, err
	}
	// begin and busy mark op o's start and end on the stream.
	begin := func(o int) error { return tm.start[o].Record(s) }
	busy := func(o int) error { return tm.end[o].Record(s) }
	// sendGrad ends a backward of micro-batch i (op o) whose input
	// gradient is dx: past stage 0 it copies dx into the send buffer on
	// the stream and sends it to the previous stage (the send is ordered
	// after the copy: see the top of this file).
	sendGrad := func(o, i, b int, dx uintptr) error {
		if p.stage > 0 {
			if err := s.CopyAsync(p.sendB[i], dx, 4*st.InSize(b), cuda.DeviceToDevice); err != nil {
				return err
			}
		}
		if err := busy(o); err != nil {
			return err
		}
		if p.stage > 0 {
			return send(p.sendB[i], st.InSize(b), p.stage-1, tagB(i))
		}
		return nil
	}
	for o, op := range p.ops {
		i := op.Micro
		b := p.sizes[i]
		switch {
		case p.last():
			xi, err := input(i, true)
			if err != nil {
				return 0, err
			}
			p.hold(1, int64(4*st.InSize(b)))
			if err := begin(o); err != nil {
				return 0, err
			}
			if _, err := st.Forward(xi, b); err != nil {
				return 0, err
			}
			dx, err := st.LossBackwardAt(p.y+uintptr(4*p.starts[i]*p.per), b*p.per, float32(b)/float32(p.batch))
			if err != nil {
				return 0, err
			}
			if err := s.CopyAsync(p.losses+uintptr(4*i), st.LossAt(), 4, cuda.DeviceToDevice); err != nil {
				return 0, err
			}
			if err := sendGrad(o, i, b, dx); err != nil {
				return 0, err
			}
		case !op.Backward:
			xi, err := input(i, true)
			if err != nil {
				return 0, err
			}
			held[i] = int64(4 * st.InSize(b))
			heldB += held[i]
			p.hold(len(held), heldB)
			if err := begin(o); err != nil {
				return 0, err
			}
			out, err := st.Forward(xi, b)
			if err != nil {
				return 0, err
			}
			lastOf[b] = i
			if err := s.CopyAsync(p.sendF[i], out, 4*st.OutSize(b), cuda.DeviceToDevice); err != nil {
				return 0, err
			}
			if err := busy(o); err != nil {
				return 0, err
			}
			if err := send(p.sendF[i], st.OutSize(b), p.stage+1, tagF(i)); err != nil {
				return 0, err
			}
			octx, err := p.ordered(ctx, evRecv+tagB(i))
			if err != nil {
				return 0, err
			}
			w, err := p.c.Recv(octx, p.buf(p.recvB[i], st.OutSize(b)), p.stage+1, tagB(i))
			if err != nil {
				return 0, err
			}
			p.track(w, "receive", tagB(i))
			bwd[i] = w
		default:
			w := bwd[i]
			delete(bwd, i)
			if err := wait(w); err != nil {
				return 0, err
			}
			if err := begin(o); err != nil {
				return 0, err
			}
			if j, ok := lastOf[b]; !ok || j != i {
				// recompute: the plan holds another micro-batch's
				// activations
				xi, err := input(i, false)
				if err != nil {
					return 0, err
				}
				if _, err := st.Forward(xi, b); err != nil {
					return 0, err
				}
				lastOf[b] = i
			}
			dx, err := st.Backward(p.recvB[i], b)
			if err != nil {
				return 0, err
			}
			heldB -= held[i]
			delete(held, i)
			if err := sendGrad(o, i, b, dx); err != nil {
				return 0, err
			}
		}
	}
	for _, w := range sends {
		if err := wait(w); err != nil {
			return 0, err
		}
	}
	// the last update's clipping's all-reduce: long done on the device
	if err := p.settleClip(ctx); err != nil {
		return 0, err
	}
	// Every rank reports the loss: the last stage's micro-batch losses
	// (one copy down), weighted by their sizes, broadcast.
	lb := []float64{0}
	if p.last() {
		ls := make([]float32, M)
		if err := p.lossEv.Record(s); err != nil {
			return 0, err
		}
		if err := p.lossWait.Wait(p.lossEv, nil); err != nil { // the step's one wait for the device
			return 0, err
		}
		if err := cuda.CopyDtoH(p.dev, floatBytes(ls), p.losses); err != nil {
			return 0, err
		}
		var sum float64
		for i, l := range ls {
			sum += float64(l) * float64(p.sizes[i])
		}
		lb[0] = sum / float64(p.batch)
	}
	w, err := p.c.Broadcast(ctx, comm.FromSlice(lb), p.k-1)
	if err != nil {
		return 0, err
	}
	if err := wait(w); err != nil {
		return 0, err
	}
	tm.pending, tm.step = true, p.stats.Steps
	tm.keep = p.opSteps < pipeline.MaxOpSteps
	if tm.keep {
		p.opSteps++
	}
	return lb[0], nil
}

func (p *devicePipe) stream() *cuda.Stream { return p.st.Stream() }

// evRecv sets the After events of receives apart from those of sends;
// evGrads is the key of the replicas' all-reduce of the gradients, evNorm
// of the stages' all-reduce of the gradient norm's square (clip).
const (
	evRecv  = 1 << 31
	evGrads = -1
	evNorm  = -2
)

// clip clips the stage's gradients by the global norm over the stages
// (-clip-grad max) with no wait for the device over NCCL
// (devmodel.Stage.ClipQueued): the stage's norm squared on the device,
// the squares all-reduced over the pipeline's Comm there (NCCL's stream
// waits for the stage's stream, which waits for the all-reduce's Done
// event), the factor computed and applied there, the norm logged there
// (Stage.GradNorms). Through a host backend comm/staging copies the
// square down once the stage's stream reaches it, and up when summed:
// the host waits for that. The same bits as the host's path
// (pipelineStrategy.ClipGrads: each stage's norm read, the squares
// all-reduced on the host, Stage.ClipGrads). On an error the Comm is
// aborted. Collective over the stages.
func (p *devicePipe) clip(ctx context.Context, max float64) error {
	err := p.st.ClipQueued(max, func(sq uintptr) error {
		if p.k == 1 {
			return nil
		}
		octx, err := p.ordered(ctx, evNorm)
		if err != nil {
			return err
		}
		if p.direct {
			if p.normDone == nil {
				if p.normDone, err = cuda.NewEvent(p.dev); err != nil {
					return err
				}
			}
			octx = cuda.WithOrder(octx, cuda.Order{After: cuda.OrderOf(octx).After, Done: p.normDone})
		}
		w, err := p.c.AllReduce(octx, comm.DeviceBuffer(sq, p.dev, comm.Float64, 1), comm.Sum)
		if err != nil {
			return fmt.Errorf("summing the gradient norm's square over the stages: %w", err)
		}
		if !p.direct { // staged: in device memory once done
			if err := w.Wait(ctx); err != nil {
				return fmt.Errorf("summing the gradient norm's square over the stages: %w", err)
			}
			return nil
		}
		p.clipOps = append(p.clipOps, inflightOp{w, "all-reduce of the gradient norm's square", evNorm})
		return p.stream().WaitEvent(p.normDone)
	})
	if err != nil {
		err = fmt.Errorf("pipeline: stage %d (cuda:%d): clipping the gradients: %w", p.stage, p.dev, err)
		comm.Abort(p.c, err)
	}
	return err
}

// settleClip checks the all-reduces of the norm's square that clip left
// (done on the device by then, or about to be).
func (p *devicePipe) settleClip(ctx context.Context) error {
	ops := p.clipOps
	p.clipOps = nil
	for _, op := range ops {
		if err := op.w.Wait(ctx); err != nil {
			return fmt.Errorf("the last update's %s: %w", op.what, err)
		}
	}
	return nil
}

// gradNorms are every clip's global norm, logged on the device, once
// the all-reduces are checked (for deviceCloseWait at most).
func (p *devicePipe) gradNorms() ([]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), deviceCloseWait)
	defer cancel()
	if err := p.settleClip(ctx); err != nil {
		return nil, fmt.Errorf("pipeline: stage %d (cuda:%d): %w", p.stage, p.dev, err)
	}
	return p.st.GradNorms()
}

// ordered records the After event of the send or receive key (its tag,
// plus evRecv for a receive) on the stage's stream and returns ctx
// carrying it (cuda.Order): the operation waits for the work queued on
// the stream so far, on the device (nccl) or on the host (staging).
func (p *devicePipe) ordered(ctx context.Context, key int) (context.Context, error) {
	e := p.evs[key]
	if e == nil {
		var err error
		if e, err = cuda.NewEvent(p.dev); err != nil {
			return nil, err
		}
		if p.evs == nil {
			p.evs = map[int]*cuda.Event{}
		}
		p.evs[key] = e
	}
	if err := e.Record(p.stream()); err != nil {
		return nil, err
	}
	return cuda.WithOrder(ctx, cuda.Order{After: e}), nil
}

func mapValues(m map[int]*cuda.Event) []*cuda.Event {
	var out []*cuda.Event
	for _, e := range m {
		out = append(out, e)
	}
	return out
}

// tagEval is the tag of evaluation's activations (no step's).
const tagEval = 1 << 30

// eval runs one evaluation batch (x on stage 0, y on the last; every
// stage rank of the replica is given the same batch) forward through the
// stages on the device, in passes of at most a micro-batch's samples
// (evalPass; the stages' forward-only plans, Stage.EvalForward, of that
// size): the last stage brings the logits down pass by pass and
// returns the mean cross-entropy over y and how many labels are the
// argmax of their logits (the first largest), as train.Evaluate does,
// and broadcasts them to the other stages, which return them too. No
// gradient is touched. On an error the Comm is aborted.
func (p *devicePipe) eval(ctx context.Context, x []float32, y []int32) (float64, int, error) {
	loss, correct, err := p.evalBatch(ctx, x, y)
	if err != nil {
		err = fmt.Errorf("pipeline: stage %d (cuda:%d): evaluating: %w", p.stage, p.dev, err)
		comm.Abort(p.c, err)
	} else {
		p.inflight = p.inflight[:0]
	}
	return loss, correct, err
}

func (p *devicePipe) evalBatch(ctx context.Context, x []float32, y []int32) (float64, int, error) {
	per := max(p.per, 1)
	b := len(y) / per
	if b == 0 || len(y) != b*per || (p.stage == 0 && len(x) < b*p.in) {
		return 0, 0, fmt.Errorf("%d inputs and %d labels are no batch (%d and %d per sample)", len(x), len(y), p.in, p.per)
	}
	st := p.st
	var logits []float32
	if p.last() {
		if err := st.CheckLabels(y); err != nil {
			return 0, 0, err
		}
		logits = make([]float32, st.OutSize(b))
	}
	// in passes of at most the largest micro-batch, each through every
	// stage (Stage.EvalForward: a forward-only plan of a pass holds less
	// than a step's plan): the activations of the whole batch are never
	// on the device at once; the logits come down pass by pass
	pass := 1
	for _, n := range p.sizes {
		pass = max(pass, n)
	}
	pass = min(pass, b)
	for i := 0; i < b; i += pass {
		n := min(pass, b-i)
		var xi []float32
		if p.stage == 0 {
			xi = x[i*p.in : (i+n)*p.in]
		}
		var li []float32
		if p.last() {
			li = logits[st.OutSize(i):st.OutSize(i+n)]
		}
		if err := p.evalPass(ctx, xi, n, li); err != nil {
			return 0, 0, err
		}
	}
	res := []float64{0, 0}
	if p.last() {
		k := st.Host.Classes()
		n := len(y)
		correct := 0
		for i := 0; i < n; i++ {
			best := 0
			for j := 1; j < k; j++ {
				if logits[i*k+j] > logits[i*k+best] {
					best = j
				}
			}
			if int32(best) == y[i] {
				correct++
			}
		}
		res[0], res[1] = models.CrossEntropy(logits[:n*k], y, k), float64(correct)
	}
	if err := comm.Run(ctx)(p.c.Broadcast(ctx, comm.FromSlice(res), p.k-1)); err != nil {
		return 0, 0, err
	}
	return res[0], int(res[1]), nil
}

// evalPass runs b samples of an evaluation batch through the stage: x
// (stage 0) goes up, the input comes from the stage before or the output
// goes to the stage after, and the last stage brings its logits down
// into logits.
func (p *devicePipe) evalPass(ctx context.Context, x []float32, b int, logits []float32) error {
	st := p.st
	eb, err := p.evalBuffers(b)
	if err != nil {
		return err
	}
	in := eb.x
	if p.stage == 0 {
		if err := p.stream().Synchronize(); err != nil { // the last batch's reads of eb.x
			return err
		}
		if err := cuda.CopyHtoD(p.dev, eb.x, floatBytes(x[:b*p.in])); err != nil {
			return err
		}
		if err := p.stream().WaitDefault(p.legacy); err != nil { // the copy ran on the legacy stream
			return err
		}
	} else {
		octx, err := p.ordered(ctx, evRecv+tagEval)
		if err != nil {
			return err
		}
		w, err := p.c.Recv(octx, p.buf(eb.in, st.InSize(b)), p.stage-1, tagEval)
		if err != nil {
			return err
		}
		p.track(w, "evaluation's receive", tagEval)
		if err := w.Wait(ctx); err != nil {
			return err
		}
		in = eb.in
	}
	out, err := st.EvalForward(in, b) // a forward-only plan: no training plan at the evaluation batch
	if err != nil {
		return err
	}
	if !p.last() {
		// the send is ordered after the copy (see the top of this file)
		if err := p.stream().CopyAsync(eb.out, out, 4*st.OutSize(b), cuda.DeviceToDevice); err != nil {
			return err
		}
		octx, err := p.ordered(ctx, tagEval)
		if err != nil {
			return err
		}
		w, err := p.c.Send(octx, p.buf(eb.out, st.OutSize(b)), p.stage+1, tagEval)
		if err != nil {
			return err
		}
		p.track(w, "evaluation's send", tagEval)
		return w.Wait(ctx)
	}
	if err := p.stream().Synchronize(); err != nil {
		return err
	}
	return cuda.CopyDtoH(p.dev, floatBytes(logits), out)
}

// evalBuffers are the device buffers of evaluation batches of b samples,
// allocated at the first.
func (p *devicePipe) evalBuffers(b int) (*evalBufs, error) {
	if eb := p.evalBufs[b]; eb != nil {
		return eb, nil
	}
	eb := &evalBufs{}
	for _, a := range []struct {
		at     *uintptr
		floats int
		need   bool
	}{{&eb.x, b * p.in, p.stage == 0}, {&eb.in, p.st.InSize(b), p.stage > 0}, {&eb.out, p.st.OutSize(b), !p.last()}} {
		if !a.need {
			continue
		}
		n := 4 * max(a.floats, 1)
		ptr, err := cuda.Malloc(p.dev, n)
		if err != nil {
			return nil, fmt.Errorf("%d bytes on cuda:%d for evaluation batches of %d: %w", n, p.dev, b, err)
		}
		p.owned = append(p.owned, ptr)
		p.fixed += int64(n)
		*a.at = ptr
	}
	if p.evalBufs == nil {
		p.evalBufs = map[int]*evalBufs{}
	}
	p.evalBufs[b] = eb
	return eb, nil
}

// upload queues the copies of the batch (stage 0) and its labels (the
// last stage) to the device on the stream, from the pinned host memory,
// once the previous step's copies from it are done (long since: they
// were its first work), so that the host does not wait for the stream.
func (p *devicePipe) upload(x []float32, y []int32) error {
	if p.stage != 0 && !p.last() {
		return nil
	}
	if p.last() {
		if err := p.st.CheckLabels(y); err != nil {
			return err
		}
	}
	if p.upQueued {
		if err := p.up.Synchronize(); err != nil {
			return err
		}
		p.upQueued = false
	}
	s := p.stream()
	if p.stage == 0 {
		n := copy(p.hx, floatBytes(x))
		if err := s.CopyAsync(p.x, uintptr(unsafe.Pointer(&p.hx[0])), n, cuda.HostToDevice); err != nil {
			return err
		}
	}
	if p.last() && len(y) > 0 {
		n := copy(p.hy, unsafe.Slice((*byte)(unsafe.Pointer(&y[0])), 4*len(y)))
		if err := s.CopyAsync(p.y, uintptr(unsafe.Pointer(&p.hy[0])), n, cuda.HostToDevice); err != nil {
			return err
		}
	}
	if err := p.up.Record(s); err != nil {
		return err
	}
	p.upQueued = true
	return nil
}

func (p *devicePipe) hold(n int, bytes int64) {
	p.stats.PeakHeld = max(p.stats.PeakHeld, n)
	p.stats.PeakHeldBytes = max(p.stats.PeakHeldBytes, bytes)
}

// Tags as package pipeline's: micro-batch i's activation 2i, its
// gradient 2i+1.
func tagF(i int) int { return 2 * i }
func tagB(i int) int { return 2*i + 1 }

func floatBytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// deviceComm gives c device buffers where it takes host memory only
// (staging.Adapt: through pinned host memory); an NCCL Comm takes them
// itself.
func deviceComm(c comm.Comm) comm.Comm { return staging.Adapt(c) }
