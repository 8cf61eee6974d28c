package devmodel

import (
	"fmt"
	"math"
	"strconv"
	"unsafe"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// Stage is layers [From, To) of an nn model placed on a device, as one
// stage of a pipeline: the layers a pipeline splits a model between are
// the children of its top Sequential (nn.Model.NumLayers; package
// pipeline's and nn.Model.NewStage's split). The stage holds only its own
// parameters, gradients and optimizer state: the range [Off, Off+N) of
// the host model's flat buffers (nn.Model.StageRange), at Params and
// Grads, in the flat layout.
//
// Forward runs the layers on an input activation in device memory (the
// batch, for the stage that starts at layer 0) and returns the output
// activation; Backward (a stage that is not the last) takes the gradient
// of the loss with respect to that output and returns the gradient with
// respect to the input, adding the parameters' gradients to Grads (so
// micro-batches accumulate); LossBackward (the last stage) takes the
// labels instead and ends in the mean cross-entropy, its gradient scaled
// by a factor (a micro-batch's share of the batch). Backward and
// LossBackward work on the activations of the last Forward of that many
// samples (each micro-batch size has its own): a pipeline that holds
// several micro-batches of one size in flight runs Forward again on the
// saved input first (recomputation, as nn's StageGraph does). Batch norm and Dropout are refused in a stage, as on
// the CPU: the recomputed forward pass would count the statistics twice
// or draw another mask.
//
// Each micro-batch size is planned once (the first at placement, others
// on first use), in a region of device memory of its own, of the exact
// size its buffers need as laid out by their lives in a forward and
// backward pass (as a Model's training plan: memory.go), kept for the
// stage's life. A Stage is not safe for concurrent use.
type Stage struct {
	Host     *nn.Model
	From, To int
	Last     bool
	// Off and N are the stage's range [Off, Off+N) of the flat buffers.
	Off, N int
	// Params and Grads are the device addresses of the stage's N
	// parameters and gradients (flat element Off first).
	Params, Grads uintptr

	// d runs the plans: its Params and Grads are Params and Grads moved
	// back by Off elements, so that the plans' flat offsets land in the
	// stage's buffers (d's own N is 0: none of Model's whole-buffer
	// methods is used on it).
	d             *Model
	plans         map[int]*plan
	ran           map[*plan]bool // planned batch sizes that ran forward
	lossPlan      *plan          // the last LossBackward's
	inPer, outPer int            // floats per sample in and out
	ws            uintptr
	norm          float64 // the last GradNorm's, while fresh
	fresh         bool
}

// CheckStage reports whether layers [from, to) of m can be a device
// stage, as PlaceStage would, without a device: every layer has device
// kernels, none is a batch norm or a Dropout.
func CheckStage(m *nn.Model, from, to int) error {
	s := &Stage{Host: m, From: from, To: to, Last: to == m.NumLayers(), d: &Model{Host: m}}
	if err := s.check(); err != nil {
		return err
	}
	_, err := s.compile(1)
	return err
}

// StageMemoryPlan lays out the training plan of layers [from, to) of m
// at micro-batches of batch samples as PlaceStage with cfg would
// (cfg.Batch is ignored), without a device, and says where the bytes
// go: the stage's fixed buffers (its range of the parameters and
// gradients, the optimizer's state, the gradient norm's workspace) and
// its plan's region, laid out as MemoryPlan's (memory.go; the engine a
// GPU's default). A pipeline's stage holds one such plan for each
// micro-batch size it runs.
func StageMemoryPlan(m *nn.Model, from, to, batch int, cfg Config) (MemoryBreakdown, error) {
	s := &Stage{Host: m, From: from, To: to, Last: to == m.NumLayers(), d: &Model{Host: m}}
	if batch < 1 {
		return MemoryBreakdown{}, fmt.Errorf("devmodel: %s: StageMemoryPlan at micro-batch %d: want at least 1", m.Name, batch)
	}
	if err := s.check(); err != nil {
		return MemoryBreakdown{}, err
	}
	mp := newMemPlan()
	if _, err := s.compileWith(batch, mp, defaultEngine(cfg), true); err != nil {
		return MemoryBreakdown{}, err
	}
	_, n := m.StageRange(from, to)
	f := map[string]int64{"parameters": 4 * int64(max(n, 1)), "gradients": 4 * int64(max(n, 1)), "gradient norm's workspace": stageClipBytes(cfg)}
	if st := optimStateBytes(int64(max(n, 1)), cfg); st > 0 {
		f["optimizer state"] = st
	}
	return mp.breakdown(f), nil
}

// stageClipBytes is a stage's gradient norm's workspace: with
// cfg.ClipGrad, the log of ClipQueued's norms after it (GradNorms).
func stageClipBytes(cfg Config) int64 {
	if cfg.ClipGrad > 0 {
		return kernels.ClipWorkspace + 8*int64(normCap)
	}
	return kernels.ClipWorkspace
}

// check validates the range and refuses the layers a stage cannot hold.
func (s *Stage) check() error {
	m := s.Host
	if m.Store != nil {
		return fmt.Errorf("devmodel: %s: a model with a parameter store (ZeRO-3) cannot be placed", m.Name)
	}
	if n := m.NumLayers(); s.From < 0 || s.To > n || s.From >= s.To {
		return fmt.Errorf("devmodel: %s: stage layers [%d, %d) are not a non-empty range of its %d layers", m.Name, s.From, s.To, n)
	}
	for i := s.From; i < s.To; i++ {
		if err := stageLayer(topLayer(m, i), topName(m, i)); err != nil {
			return fmt.Errorf("devmodel: %s: %w", m.Name, err)
		}
	}
	return nil
}

// stageLayer refuses batch norm and Dropout anywhere in l.
func stageLayer(l nn.Layer, name string) error {
	switch l := l.(type) {
	case *nn.BatchNorm:
		return fmt.Errorf("layer %s (%T): batch norm cannot be in a pipeline stage (a micro-batch's statistics are not the batch's, and the recomputed forward pass would update the running statistics twice); use a model without batch norm", quote(name), l)
	case *nn.Dropout:
		if l.P != 0 {
			return fmt.Errorf("layer %s (dropout): Dropout cannot be in a pipeline stage (the recomputed forward pass would draw another mask, as on the CPU); use P 0", quote(name))
		}
	case nn.Container:
		for _, c := range l.Children() {
			if err := stageLayer(c.Layer, child(name, c.Name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// topLayer is pipeline layer i of m: child i of its top Sequential, or
// the whole network.
func topLayer(m *nn.Model, i int) nn.Layer {
	if s, ok := m.Net.(*nn.Sequential); ok {
		return s.Layers[i]
	}
	return m.Net
}

func topName(m *nn.Model, i int) string {
	if _, ok := m.Net.(*nn.Sequential); ok {
		return strconv.Itoa(i)
	}
	return ""
}

// PlaceStage puts layers [from, to) of m on cfg.Device: it plans them for
// micro-batches of cfg.Batch samples (refusing, by name, a layer without
// device kernels, a batch norm or a Dropout), copies the stage's
// parameters up from m's Flat.Value and zeroes its gradients and
// optimizer state. A stage never clips by itself (the norm that clipping
// needs spans every stage: GradNorm and ClipGrads, or ClipQueued);
// cfg.ClipGrad, when positive, keeps a log of ClipQueued's norms on the
// device (GradNorms). Close frees it all.
func PlaceStage(m *nn.Model, from, to int, cfg Config) (_ *Stage, err error) {
	if cfg.Batch < 1 {
		return nil, fmt.Errorf("devmodel: %s: micro-batch %d < 1", m.Name, cfg.Batch)
	}
	if err := deviceOptim(m.Name, cfg.Optim); err != nil {
		return nil, err
	}
	if cfg.ClipGrad < 0 || math.IsNaN(cfg.ClipGrad) {
		return nil, fmt.Errorf("devmodel: %s: stage [%d, %d): Config.ClipGrad %v: want 0, or a positive bound to log ClipQueued's norms", m.Name, from, to, cfg.ClipGrad)
	}
	s := &Stage{Host: m, From: from, To: to, Last: to == m.NumLayers(), plans: map[int]*plan{}, ran: map[*plan]bool{}}
	if err := s.check(); err != nil {
		return nil, err
	}
	s.Off, s.N = m.StageRange(from, to)
	d := &Model{Host: m, dev: cfg.Device, cfg: cfg, opt: withDefaults(cfg.Optim), lr: cfg.Optim.LR}
	s.d = d
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := d.open(); err != nil {
		return nil, err
	}
	n := max(s.N, 1)
	if s.Params, err = d.malloc(4 * n); err != nil {
		return nil, err
	}
	if s.Grads, err = d.malloc(4 * n); err != nil {
		return nil, err
	}
	d.Params, d.Grads = s.Params-uintptr(4*s.Off), s.Grads-uintptr(4*s.Off)
	d.cacheWeights(s.Params, s.N) // bf16 autocast's weight cache (autocast.go)
	if err := d.allocState(n); err != nil {
		return nil, err
	}
	if s.ws, err = d.malloc(int(stageClipBytes(cfg))); err != nil {
		return nil, err
	}
	if cfg.ClipGrad > 0 {
		d.clipWS = s.ws // the norms' log after it: d's logNorm, GradNorms
	}
	if err := s.CopyFromHost(); err != nil {
		return nil, err
	}
	if err := s.ZeroGrad(); err != nil {
		return nil, err
	}
	p, err := s.compile(cfg.Batch)
	if err != nil {
		return nil, err
	}
	s.plans[cfg.Batch] = p
	s.inPer, s.outPer = p.in.size()/cfg.Batch, p.out.size()/cfg.Batch
	return s, nil
}

// compile plans the stage for batch samples (a dry run when s.d has no
// kernels): on a device in the two passes of a region of its own
// (memory.go's layout, as a Model's training plan; the plans of other
// micro-batch sizes keep their activations meanwhile).
func (s *Stage) compile(batch int) (*plan, error) {
	d := s.d
	if d.k == nil || !planRegion {
		return s.compileWith(batch, nil, nil, false) // CheckStage; or the pool's blocks
	}
	p, region, size, err := d.laidOut(fmt.Sprintf("stage [%d, %d) at micro-batch %d", s.From, s.To, batch), 0, 0, func(mp *memPlan, record bool) (*plan, error) {
		return s.compileWith(batch, mp, nil, record)
	})
	if err != nil && region != 0 {
		d.free(region, size)
	}
	return p, err
}

// compileWith is compile's pass: with mp (recording if record, else
// placing) the buffers in a region, without from the pool. Layers [0,
// From) are walked dry for the input's shape. dry: the engine, where
// there is no device (StageMemoryPlan).
func (s *Stage) compileWith(batch int, mp *memPlan, dry *dryEngine, record bool) (_ *plan, err error) {
	m, d := s.Host, s.d
	before := &compiler{m: m, p: &plan{batch: batch}}
	x := &act{shape: append([]int{batch}, m.InputShape()...)}
	for i := 0; i < s.From; i++ {
		if x, err = before.layer(topLayer(m, i), topName(m, i), x); err != nil {
			return nil, fmt.Errorf("devmodel: %s: %w", m.Name, err)
		}
	}
	c := &compiler{m: m, p: &plan{batch: batch}, pi: before.pi, bi: before.bi, mem: mp, dry: dry, attOps: [2]int{math.MaxInt, -1}}
	if d.k != nil {
		c.d = d
	}
	defer func() {
		if err != nil && c.d != nil {
			d.release(c.p)
		}
	}()
	in := &act{shape: x.shape}
	if in.val, err = c.allocAs(roleBatch, in.shape, 4*in.size()); err != nil {
		return nil, err
	}
	if s.From > 0 { // the gradient to send back
		if in.grad, err = c.allocAs(roleGrad, in.shape, 4*in.size()); err != nil {
			return nil, err
		}
	}
	c.p.in = in
	out := in
	for i := s.From; i < s.To; i++ {
		y, err := c.layer(topLayer(m, i), topName(m, i), out)
		if err != nil {
			return nil, fmt.Errorf("devmodel: %s: %w", m.Name, err)
		}
		if out != in { // its readers are planned (as a Sequential's child)
			c.mem.consumed(out, topLayer(m, i), len(c.p.ops))
		}
		out = y
	}
	end, _, _ := m.LayerParamRange(s.To)
	if c.pi != end {
		return nil, fmt.Errorf("devmodel: %s: stage [%d, %d): parameters %d to %d placed, want up to %d", m.Name, s.From, s.To, before.pi, c.pi, end)
	}
	p := c.p
	p.out = out
	if out.grad == 0 {
		if out.grad, err = c.allocAs(roleGrad, out.shape, 4*out.size()); err != nil {
			return nil, err
		}
	}
	// the input comes in and its gradient goes out, the output goes out
	// and its gradient comes in (or the loss writes it), outside the ops
	c.mem.pin(in.val, in.grad, out.val, out.grad)
	c.where, c.whereKind, c.whereLayer = "", "", nil
	if s.Last {
		cl := m.Classes()
		if len(out.shape) < 2 || out.shape[len(out.shape)-1] != cl {
			return nil, fmt.Errorf("devmodel: %s: the output is %v, not logits of %d classes", m.Name, out.shape, cl)
		}
		p.classes, p.rows = cl, out.size()/cl
		for _, b := range []struct {
			to *uintptr
			n  int
		}{{&p.labels, 4 * p.rows}, {&p.rowLoss, 4 * p.rows}, {&p.loss, 8}} {
			if *b.to, err = c.allocAs(roleBatch, nil, b.n); err != nil {
				return nil, err
			}
		}
	}
	for _, b := range []struct {
		to *uintptr
		n  int
	}{{&p.convWS, 4 * c.convWS}, {&p.attWS, 4 * c.attWS}} {
		if b.n > 0 {
			if *b.to, err = c.allocAs(roleWS, nil, b.n); err != nil {
				return nil, err
			}
		}
	}
	if !c.attFwdWS && c.attOps[1] >= 0 { // the attention workspace: the backward's only
		c.mem.backwardOnly(c.attOps[0], c.attOps[1], p.attWS)
	}
	// read by bf16 products only: the copy alone (memory.go); the input
	// and output, pinned above, are kept (the sends read them in fp32)
	c.keepCopiesOnly()
	if record {
		mp.layout(len(p.ops))
	}
	return p, nil
}

// planFor is the plan for batch samples, made on first use.
func (s *Stage) planFor(batch int) (*plan, error) {
	if p := s.plans[batch]; p != nil {
		return p, nil
	}
	if batch < 1 {
		return nil, fmt.Errorf("devmodel: %s: stage [%d, %d): micro-batch %d < 1", s.Host.Name, s.From, s.To, batch)
	}
	p, err := s.compile(batch)
	if err != nil {
		return nil, err
	}
	s.plans[batch] = p
	return p, nil
}

// InSize and OutSize are the float32s of the input and output
// activations of batch samples (OutSize: the logits, on the last stage).
func (s *Stage) InSize(batch int) int { return batch * s.inPer }

// OutSize: see InSize.
func (s *Stage) OutSize(batch int) int { return batch * s.outPer }

// Device is the stage's device.
func (s *Stage) Device() int { return s.d.dev }

// Stream is the stream the stage's work is queued on, a non-blocking
// one: work on other streams (the legacy default stream's cudaMemcpy,
// NCCL's) is ordered with it by events only (a cuda.Order for
// collectives and sends, Stream.WaitEvent, Stream.WaitDefault).
func (s *Stage) Stream() *cuda.Stream { return s.d.s }

// PeakBytes is the most device memory the stage has held at once (its
// buffers, its plans' regions and its evaluation arena).
func (s *Stage) PeakBytes() int64 { return s.d.peak }

// Forward runs the stage's layers on the input activation of batch
// samples at x (InSize(batch) float32s of device memory on the stage's
// device; for the first stage, the batch) and returns the device address
// of the output activation (OutSize(batch) float32s), valid until the
// next Forward of that many samples. It queues the work on Stream and
// does not wait for it. The input is read on Stream: work on another
// stream that writes it (the legacy default stream's cudaMemcpy too:
// Stream is non-blocking) must be synchronized first or waited for with
// an event; so must work on another stream that reads the output, or
// the input gradient of Backward and LossBackward.
func (s *Stage) Forward(x uintptr, batch int) (uintptr, error) {
	p, err := s.planFor(batch)
	if err != nil {
		return 0, err
	}
	s.fresh = false
	if x != p.in.val {
		if err := s.d.s.CopyAsync(p.in.val, x, 4*p.in.size(), cuda.DeviceToDevice); err != nil {
			return 0, err
		}
	}
	s.d.run++
	for _, o := range p.ops {
		if o.fwd != nil {
			if err := o.fwd(); err != nil {
				return 0, fmt.Errorf("devmodel: %s: layer %s forward: %w", s.Host.Name, o.name, err)
			}
		}
	}
	s.ran[p] = true
	return p.out.val, nil
}

// Backward runs the backward pass of a stage that is not the last from
// dOut, the gradient of the loss with respect to the output of the last
// Forward of batch samples (OutSize(batch) float32s of device memory),
// adds the parameters' gradients to Grads and returns the device address
// of the gradient with respect to that Forward's input (0 on the first
// stage, whose input is the data), valid until the next Backward of that
// many samples. Queued on Stream.
func (s *Stage) Backward(dOut uintptr, batch int) (uintptr, error) {
	p := s.plans[batch]
	switch {
	case s.Last:
		return 0, fmt.Errorf("devmodel: %s: stage [%d, %d) is the last: use LossBackward", s.Host.Name, s.From, s.To)
	case p == nil || !s.ran[p]:
		return 0, fmt.Errorf("devmodel: %s: stage [%d, %d): Backward of %d samples before their Forward", s.Host.Name, s.From, s.To, batch)
	}
	if dOut != p.out.grad {
		if err := s.d.s.CopyAsync(p.out.grad, dOut, 4*p.out.size(), cuda.DeviceToDevice); err != nil {
			return 0, err
		}
	}
	return s.backward(p)
}

func (s *Stage) backward(p *plan) (uintptr, error) {
	s.fresh = false
	for i := len(p.ops) - 1; i >= 0; i-- {
		if o := p.ops[i]; o.bwd != nil {
			if err := o.bwd(); err != nil {
				return 0, fmt.Errorf("devmodel: %s: layer %s backward: %w", s.Host.Name, o.name, err)
			}
		}
	}
	return p.in.grad, nil
}

// LossBackward, on the last stage, takes the mean cross-entropy of the
// logits of the last Forward of as many samples as y has labels for
// (LabelsPerSample per sample; they go up) against y, back-propagates it multiplied by scale (a
// micro-batch's share of the batch, as nn's StageGraph.Scale) and
// returns the device address of the gradient with respect to that
// Forward's input (0 when the stage is the whole model). The loss itself
// (unscaled, a float32) stays on the device at LossAt until the next
// LossBackward; Loss reads it. Queued on Stream.
func (s *Stage) LossBackward(y []int32, scale float32) (uintptr, error) {
	p, err := s.lossPlanFor(len(y))
	if err != nil {
		return 0, err
	}
	if err := s.CheckLabels(y); err != nil {
		return 0, err
	}
	if err := s.d.upload([]uintptr{p.labels}, bytesOf(y)); err != nil {
		return 0, err
	}
	return s.lossBackward(p, p.labels, scale)
}

// LossBackwardAt is LossBackward with the n labels already in device
// memory at labels (n int32s on the stage's device, written before on
// Stream, or on another stream Stream waited for), so that the host need not
// wait for the device to upload them: a pipeline uploads a batch's
// labels once, asynchronously from pinned memory. The caller checks them
// first with CheckLabels (a label out of range would be read as an
// index into the logits).
func (s *Stage) LossBackwardAt(labels uintptr, n int, scale float32) (uintptr, error) {
	p, err := s.lossPlanFor(n)
	if err != nil {
		return 0, err
	}
	return s.lossBackward(p, labels, scale)
}

// CheckLabels refuses a label outside [0, Classes) of the model.
func (s *Stage) CheckLabels(y []int32) error {
	m := s.Host
	for i, l := range y {
		if l < 0 || int(l) >= m.Classes() {
			return fmt.Errorf("devmodel: %s: label %d (index %d) out of range [0, %d)", m.Name, l, i, m.Classes())
		}
	}
	return nil
}

// lossPlanFor is the plan of the last Forward whose samples have n
// labels, on the last stage.
func (s *Stage) lossPlanFor(n int) (*plan, error) {
	m := s.Host
	if !s.Last {
		return nil, fmt.Errorf("devmodel: %s: stage [%d, %d) is not the last: use Backward", m.Name, s.From, s.To)
	}
	per := m.LabelsPerSample()
	p := s.plans[n/max(per, 1)]
	if n%max(per, 1) != 0 || p == nil || !s.ran[p] {
		return nil, fmt.Errorf("devmodel: %s: stage [%d, %d): %d labels (%d per sample) for no Forward of as many samples", m.Name, s.From, s.To, n, per)
	}
	return p, nil
}

func (s *Stage) lossBackward(p *plan, labels uintptr, scale float32) (uintptr, error) {
	if err := s.d.k.CrossEntropy(s.d.s, p.loss, p.rowLoss, p.out.val, labels, p.rows, p.classes); err != nil {
		return 0, err
	}
	if err := s.d.k.CrossEntropyBackward(s.d.s, p.out.grad, p.out.val, labels, p.rows, p.classes, scale/float32(p.rows)); err != nil {
		return 0, err
	}
	s.lossPlan = p
	return s.backward(p)
}

// LossAt is the device address of the last LossBackward's mean loss (a
// float32; 0 before any).
func (s *Stage) LossAt() uintptr {
	if s.lossPlan == nil {
		return 0
	}
	return s.lossPlan.loss
}

// Loss reads the last LossBackward's mean loss (4 bytes down, after the
// work queued before it).
func (s *Stage) Loss() (float32, error) {
	at := s.LossAt()
	if at == 0 {
		return 0, fmt.Errorf("devmodel: %s: stage [%d, %d): no loss computed", s.Host.Name, s.From, s.To)
	}
	var v [1]float32
	err := s.d.download(bytesOf(v[:]), at)
	return v[0], err
}

// SetLR sets the learning rate of the next updates.
func (s *Stage) SetLR(lr float64) { s.d.lr = lr }

// Steps is the number of optimizer updates so far.
func (s *Stage) Steps() int64 { return s.d.step }

// ZeroGrad zeroes the stage's gradients.
func (s *Stage) ZeroGrad() error {
	s.fresh = false
	return s.d.memset(s.Grads, 4*max(s.N, 1))
}

// Update applies one optimizer step (Config.Optim, the current learning
// rate) to the stage's parameters, as package optim does; it does not
// zero the gradients.
func (s *Stage) Update() error {
	d := s.d
	d.ParamsChanged()
	d.step++
	s.fresh = false
	if s.N == 0 {
		return nil
	}
	o := d.opt
	if o.Name == "sgd" {
		return d.k.SGD(d.s, s.Params, s.Grads, d.state[0], s.N, kernels.SGDConfig{LR: float32(d.lr), Momentum: float32(o.Momentum), WeightDecay: float32(o.WeightDecay)})
	}
	return d.k.Adam(d.s, s.Params, s.Grads, d.state[0], d.state[1], s.N,
		kernels.AdamConfig{LR: d.lr, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay, Decoupled: o.Name == "adamw"}, d.step)
}

// GradNorm is the L2 norm of the stage's gradients, in float64 (8 bytes
// down). A pipeline's global norm is the square root of the sum over the
// stages of its square; ClipGrads then scales each stage.
func (s *Stage) GradNorm() (float64, error) {
	if s.N == 0 {
		return 0, nil
	}
	// No limit: the kernel leaves the norm at ws and scales nothing.
	if err := s.d.k.ClipGradNorm(s.d.s, s.Grads, s.N, math.Inf(1), s.ws); err != nil {
		return 0, err
	}
	var v [1]float64
	if err := s.d.download(bytesOfFloat64(v[:]), s.ws); err != nil {
		return 0, err
	}
	s.norm, s.fresh = v[0], true
	return v[0], nil
}

// ClipGrads clips the stage's gradients to max given norm, the global
// norm over every stage (train's -clip-grad, as train.ClipGradNorm does):
// when max / (norm + 1e-6) is below 1 and norm finite, every gradient is
// multiplied by that factor as a float32, bit for bit the CPU's
// multiplication.
func (s *Stage) ClipGrads(norm, max float64) error {
	coef := max / (norm + 1e-6)
	if !(coef < 1) || math.IsInf(norm, 0) || math.IsNaN(norm) || s.N == 0 {
		return nil
	}
	if !s.fresh {
		if _, err := s.GradNorm(); err != nil {
			return err
		}
	}
	local := s.norm
	if local == 0 || math.IsInf(local, 0) || math.IsNaN(local) {
		return nil // zero gradients stay zero
	}
	// gpu/kernels' ClipGradNorm scales by float32(lim / (local + 1e-6)),
	// local being this stage's norm, which it computes again, the same
	// to the bit (a fixed tree): choose lim so that this factor is
	// float32(coef). The device divides in IEEE float64 as Go does.
	want, x := float32(coef), local+1e-6
	lim := coef * x
	for i := 0; ; i++ {
		q := lim / x
		if float32(q) == want && q < 1 {
			break
		}
		if i == 64 {
			return fmt.Errorf("devmodel: %s: stage [%d, %d): no clipping limit gives the factor %v", s.Host.Name, s.From, s.To, coef)
		}
		if float32(q) < want {
			lim = math.Nextafter(lim, math.Inf(1))
		} else {
			lim = math.Nextafter(lim, 0)
		}
	}
	s.fresh = false
	return s.d.k.ClipGradNorm(s.d.s, s.Grads, s.N, lim, s.ws)
}

// ClipQueued clips the stage's gradients as GradNorm and ClipGrads do
// with the global norm over the stages, bit for bit, with nothing read
// on the host: the stage's norm is squared on the device into the
// float64 at sq, sum (the caller's: an all-reduce of that float64 over
// the stages, in place, ordered with the stage's stream, which must wait
// for its result before sum returns, or the host for it) sums it over
// the stages, and kernels compute the global norm and the factor,
// float32(max / (norm + 1e-6)) (kernels.ClipGlobalExact), and scale the
// stage's gradients. The global norm goes into the log GradNorms reads:
// the stage must be placed with Config.ClipGrad.
func (s *Stage) ClipQueued(max float64, sum func(sq uintptr) error) error {
	d := s.d
	if d.clipWS == 0 || d.cfg.ClipGrad <= 0 {
		return fmt.Errorf("devmodel: %s: stage [%d, %d): ClipQueued on a stage placed without Config.ClipGrad", s.Host.Name, s.From, s.To)
	}
	s.fresh = false
	// The stage's norm, nothing scaled (an infinite bound never clips;
	// no gradient: 0).
	if err := d.k.ClipGradNorm(d.s, s.Grads, s.N, math.Inf(1), s.ws); err != nil {
		return err
	}
	// The partial sums are read: their first float64 holds the square.
	sq := s.ws + 16
	if err := d.k.ClipSquare(d.s, sq, s.ws); err != nil {
		return err
	}
	if err := sum(sq); err != nil {
		return err
	}
	if err := d.k.ClipGlobalExact(d.s, s.Grads, s.N, max, s.ws, sq); err != nil {
		return err
	}
	return d.logNorm()
}

// GradNorms are the global norms (before clipping) of every ClipQueued
// so far, in order, logged on the device (no step waits for them): one
// wait for the stage's stream brings them down. Nil without
// Config.ClipGrad.
func (s *Stage) GradNorms() ([]float64, error) { return s.d.GradNorms() }

// CopyToHost copies the stage's parameters into its range of the host
// model's Flat.Value (the rest is left as it is).
func (s *Stage) CopyToHost() error {
	if err := s.d.s.Synchronize(); err != nil {
		return err
	}
	return cuda.CopyDtoH(s.d.dev, bytesOf(s.Host.Flat.Value[s.Off:s.Off+s.N]), s.Params)
}

// CopyFromHost copies the stage's range of the host model's Flat.Value
// up (after loading a checkpoint into it).
func (s *Stage) CopyFromHost() error {
	s.d.ParamsChanged()
	if err := s.d.s.Synchronize(); err != nil {
		return err
	}
	if err := cuda.CopyHtoD(s.d.dev, s.Params, bytesOf(s.Host.Flat.Value[s.Off:s.Off+s.N])); err != nil {
		return err
	}
	return s.d.afterLegacy()
}

// GradsToHost copies the stage's gradients into dst (N float32s).
func (s *Stage) GradsToHost(dst []float32) error {
	if len(dst) != s.N {
		return fmt.Errorf("devmodel: %d gradients into %d", s.N, len(dst))
	}
	if err := s.d.s.Synchronize(); err != nil {
		return err
	}
	return cuda.CopyDtoH(s.d.dev, bytesOf(dst), s.Grads)
}

// stateBuffers are the optimizer state's device buffers by optim's
// names.
func (s *Stage) stateBuffers() map[string]uintptr {
	d := s.d
	switch {
	case d.opt.Name == "sgd" && d.state[0] != 0:
		return map[string]uintptr{"momentum_buffer": d.state[0]}
	case d.opt.Name != "sgd":
		return map[string]uintptr{"exp_avg": d.state[0], "exp_avg_sq": d.state[1]}
	}
	return map[string]uintptr{}
}

// OptimStateToHost copies the stage's optimizer state and step count
// into o, a host optimizer of the same configuration for the stage's N
// values (optim.New(cfg.Optim, N)).
func (s *Stage) OptimStateToHost(o optim.Optimizer) error {
	if err := s.d.s.Synchronize(); err != nil {
		return err
	}
	st, _ := o.State()
	for name, p := range s.stateBuffers() {
		v, ok := st[name]
		if !ok || len(v) != s.N {
			return fmt.Errorf("devmodel: the host optimizer (%s) has no %s of %d values", o.Name(), name, s.N)
		}
		if err := cuda.CopyDtoH(s.d.dev, bytesOf(v), p); err != nil {
			return err
		}
	}
	o.SetStep(s.d.step)
	return nil
}

// OptimStateFromHost copies o's state (N values each) and step count up.
func (s *Stage) OptimStateFromHost(o optim.Optimizer) error {
	if err := s.d.s.Synchronize(); err != nil {
		return err
	}
	st, t := o.State()
	for name, p := range s.stateBuffers() {
		v, ok := st[name]
		if !ok || len(v) != s.N {
			return fmt.Errorf("devmodel: the host optimizer (%s) has no %s of %d values", o.Name(), name, s.N)
		}
		if err := cuda.CopyHtoD(s.d.dev, p, bytesOf(v)); err != nil {
			return err
		}
	}
	s.d.step = t
	return s.d.afterLegacy()
}

// Close frees the stage's device memory (after its work is done).
func (s *Stage) Close() error {
	d := s.d
	if d == nil {
		return nil
	}
	if d.s != nil {
		d.s.Synchronize()
	}
	if d.pool != nil {
		for _, p := range s.plans {
			d.release(p)
		}
	}
	s.plans, s.ran, s.lossPlan = nil, nil, nil
	return d.Close()
}

func bytesOfFloat64(v []float64) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8*len(v))
}
