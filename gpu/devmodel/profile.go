package devmodel

// The device profile: CUDA timing events around each layer's forward and
// backward work, the loss and the optimizer update of every training step,
// summed by layer kind. Off unless the environment asks for it
// (EnvProfile); the hooks in ForwardBackward, Update and Close cost a nil
// check then.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/nn"
)

// EnvProfile turns the device profile on for every Model placed while it
// is set: GDIST_DEVICE_PROFILE=FILE writes the profile (Profile, as JSON)
// to FILE when the model is closed; "1" or "stderr" prints it as a table
// on stderr then. Model.Profile reads it at any time.
//
// Each training step's work is bracketed by timing events (cuda
// NewTimingEvent) recorded on the model's stream: before and after each
// layer's forward and backward work, the loss (softmax cross-entropy and
// its gradient: the time between the last forward and the first backward
// op) and Update (clipping and the optimizer). Events are read, never
// waited for in the step, except that a step first waits for the
// previous step's last event (already done in training: the loss read
// waits for the forward and backward pass, so only the update's tail can
// still run). The profile thus changes little of what it measures: a few
// microseconds of host time per layer for the records.
const EnvProfile = "GDIST_DEVICE_PROFILE"

// ProfileWarmup is how many first steps a profile leaves out (cuBLAS's
// first calls choose their algorithms; the caching pool fills).
const ProfileWarmup = 2

// Profile is where a model's training steps spent device time, by layer
// kind: the means over the steps after the first ProfileWarmup (over all
// of them when there were no more).
type Profile struct {
	Model string `json:"model"`
	Batch int    `json:"batch"` // samples per step (the last step's)
	// Steps is how many steps the means are over, Warmup how many first
	// steps were left out.
	Steps  int `json:"steps"`
	Warmup int `json:"warmup_steps"`
	// StepMs is the device time of a step: from the start of the first
	// layer's forward work to the end of the update (or of the backward
	// pass, for steps without an update).
	StepMs float64 `json:"step_ms"`
	// Kinds are the kinds of work by time, most first: "linear" (the
	// Linear layers' products and attention's qkv and output
	// projections), "attention" (its scores, causal softmax and weighted
	// sums), "layernorm",
	// "gelu", "relu", "residual" (the adds), "embedding", "conv2d",
	// "batchnorm", "maxpool", "dropout", "tanh", "loss" (softmax
	// cross-entropy, forward and gradient), "optimizer" (clipping and
	// the update) and "gaps": the rest of StepMs, where the device
	// waited for the host (kernel launches, synchronous copies and
	// memsets).
	Kinds []KindTime `json:"kinds"`
	// Layers are the layers by time, most first (at most 40).
	Layers []LayerTime `json:"layers"`
}

// KindTime is one layer kind's device time per step (milliseconds).
type KindTime struct {
	Kind       string  `json:"kind"`
	Layers     int     `json:"layers"` // how many layers of the kind (attention's projections do not count as Linear layers)
	ForwardMs  float64 `json:"forward_ms"`
	BackwardMs float64 `json:"backward_ms"`
	TotalMs    float64 `json:"total_ms"`
	Share      float64 `json:"share"` // of StepMs
}

// LayerTime is one layer's device time per step (milliseconds), by its
// PyTorch name (the model's parameter prefix).
type LayerTime struct {
	Name       string  `json:"name"`
	Kind       string  `json:"kind"`
	ForwardMs  float64 `json:"forward_ms"`
	BackwardMs float64 `json:"backward_ms"`
}

// span is one timed piece of a step: events ev[a] to ev[b].
type span struct {
	layer, kind string
	bwd         bool
	a, b        int
}

// profiler holds a model's events and sums.
type profiler struct {
	out     string // EnvProfile's value
	kinds   map[string]string
	wrapped map[*plan]bool
	ev      []*cuda.Event // reused every step
	n       int           // events recorded in this step
	spans   []span
	open    bool // a step is recorded and not summed yet
	lastFwd int  // the last forward op's end event in this step (-1: none)
	inBwd   bool
	// The op under way: its layer, direction, and the segment of it not
	// yet summed (profileSplit cuts an op into kinds).
	cur      string
	curBwd   bool
	segStart int
	segKind  string
	batch    int
	seen     int // steps recorded
	steps    int // steps summed (after the warm-up)
	stepMs   float64
	sum      map[[2]string]float64 // {kind or "layer:"+name, "f" or "b"} -> ms
	counted  map[string]bool       // layers seen
	err      error
}

var (
	profMu    sync.Mutex
	profilers = map[*Model]*profiler{}
)

// prof is d's profiler, made at its first step when EnvProfile is set;
// nil otherwise.
func (d *Model) prof() *profiler {
	profMu.Lock()
	defer profMu.Unlock()
	if p, ok := profilers[d]; ok {
		return p
	}
	var p *profiler
	if v := os.Getenv(EnvProfile); v != "" && v != "0" {
		p = &profiler{out: v, kinds: layerKinds(d.Host), wrapped: map[*plan]bool{}, sum: map[[2]string]float64{}, counted: map[string]bool{}, lastFwd: -1}
	}
	profilers[d] = p
	return p
}

// profileStep starts a profiled training step on plan pl (its first
// step: its ops wrapped with events; evaluation keeps the ops
// unwrapped). The hook at the top of ForwardBackward.
func (d *Model) profileStep(pl *plan) {
	p := d.prof()
	if p == nil || p.err != nil {
		return
	}
	p.finish(d)
	if !p.wrapped[pl] {
		p.wrapped[pl] = true
		for i := range pl.ops {
			o := &pl.ops[i]
			if o.eval == nil {
				o.eval = o.fwd
			}
			o.fwd = p.timed(d, o.name, false, o.fwd)
			o.bwd = p.timed(d, o.name, true, o.bwd)
		}
	}
	p.open, p.n, p.spans, p.lastFwd, p.inBwd, p.batch = true, 0, p.spans[:0], -1, false, pl.batch
}

// profileUpdate brackets Update with events: the hook at its top is
// `defer d.profileUpdate()()`.
func (d *Model) profileUpdate() func() {
	p := d.prof()
	if p == nil || !p.open || p.err != nil {
		return func() {}
	}
	a := p.record(d)
	return func() {
		p.spans = append(p.spans, span{layer: "(update)", kind: "optimizer", a: a, b: p.record(d)})
	}
}

// profileClose writes the profile where EnvProfile says and forgets d.
// The hook in Close.
func (d *Model) profileClose() {
	profMu.Lock()
	p := profilers[d]
	delete(profilers, d)
	profMu.Unlock()
	if p == nil {
		return
	}
	if p.err == nil {
		p.finish(d)
		if err := p.write(d); err != nil {
			fmt.Fprintf(os.Stderr, "devmodel: %s: %v\n", d.Host.Name, err)
		}
	}
	for _, e := range p.ev {
		e.Destroy()
	}
}

// Profile returns the device profile so far, or nil when EnvProfile was
// not set when the model took its first step (or no step was taken).
func (d *Model) Profile() (*Profile, error) {
	profMu.Lock()
	p := profilers[d]
	profMu.Unlock()
	if p == nil {
		return nil, nil
	}
	p.finish(d)
	if p.err != nil {
		return nil, p.err
	}
	return p.report(d), nil
}

// record records the step's next event on d's stream and returns its
// index.
func (p *profiler) record(d *Model) int {
	if p.err != nil {
		return 0
	}
	if p.n == len(p.ev) {
		e, err := cuda.NewTimingEvent(d.dev)
		if err != nil {
			p.err = fmt.Errorf("devmodel: profile: %w", err)
			return 0
		}
		p.ev = append(p.ev, e)
	}
	if err := p.ev[p.n].Record(d.s); err != nil {
		p.err = fmt.Errorf("devmodel: profile: %w", err)
		return 0
	}
	p.n++
	return p.n - 1
}

// timed wraps an op's fwd or bwd with events (nil stays nil).
func (p *profiler) timed(d *Model, name string, bwd bool, f func() error) func() error {
	if f == nil {
		return nil
	}
	kind := p.kinds[name]
	if kind == "" {
		kind = "other"
	}
	return func() error {
		if p.err != nil || !p.open {
			return f()
		}
		a := p.record(d)
		if bwd && !p.inBwd {
			p.inBwd = true
			if p.lastFwd >= 0 {
				p.spans = append(p.spans, span{layer: "(loss)", kind: "loss", a: p.lastFwd, b: a})
			}
		}
		p.cur, p.curBwd, p.segStart, p.segKind = name, bwd, a, kind
		err := f()
		b := p.record(d)
		if !bwd {
			p.lastFwd = b
		}
		p.spans = append(p.spans, span{layer: name, kind: p.segKind, bwd: bwd, a: p.segStart, b: b})
		p.cur = ""
		if p.err != nil {
			return p.err
		}
		return err
	}
}

// profileSplit, inside an op's work, says that the work queued since the
// op began (or since the last split) is of kind prev and what follows of
// kind next: attention's projections are "linear", its scores, softmax
// and weighted sums "attention". The hooks in the attention op (plan.go).
func (d *Model) profileSplit(prev, next string) {
	p := d.prof()
	if p == nil || !p.open || p.err != nil || p.cur == "" {
		return
	}
	e := p.record(d)
	p.spans = append(p.spans, span{layer: p.cur, kind: prev, bwd: p.curBwd, a: p.segStart, b: e})
	p.segStart, p.segKind = e, next
}

// finish sums the recorded step's events (waiting for its last one).
func (p *profiler) finish(d *Model) {
	if !p.open || p.err != nil {
		return
	}
	p.open = false
	if p.n < 2 {
		return
	}
	last := p.ev[p.n-1]
	if err := last.Synchronize(); err != nil {
		p.err = fmt.Errorf("devmodel: profile: %w", err)
		return
	}
	p.seen++
	if p.seen <= ProfileWarmup {
		return
	}
	ms := func(a, b int) float64 {
		v, err := p.ev[a].ElapsedMs(p.ev[b])
		if err != nil && p.err == nil {
			p.err = fmt.Errorf("devmodel: profile: %w", err)
		}
		return float64(v)
	}
	p.steps++
	p.stepMs += ms(0, p.n-1)
	for _, s := range p.spans {
		t, ph := ms(s.a, s.b), "f"
		if s.bwd {
			ph = "b"
		}
		p.sum[[2]string{s.kind, ph}] += t
		if !strings.HasPrefix(s.layer, "(") {
			p.sum[[2]string{"layer:" + s.layer, ph}] += t
			p.counted[s.layer] = true
		}
	}
}

// report is the profile's means (over the summed steps, or, before any
// step was past the warm-up, nothing but the step count).
func (p *profiler) report(d *Model) *Profile {
	r := &Profile{Model: d.Host.Name, Batch: p.batch, Steps: p.steps, Warmup: min(p.seen, ProfileWarmup), Kinds: []KindTime{}, Layers: []LayerTime{}}
	if p.steps == 0 {
		return r
	}
	n := float64(p.steps)
	r.StepMs = p.stepMs / n
	count := map[string]int{}
	for l := range p.counted {
		count[p.kinds[l]]++
	}
	byKind := map[string]*KindTime{}
	for k, v := range p.sum {
		if strings.HasPrefix(k[0], "layer:") {
			continue
		}
		kt := byKind[k[0]]
		if kt == nil {
			kt = &KindTime{Kind: k[0], Layers: count[k[0]]}
			byKind[k[0]] = kt
		}
		if k[1] == "b" {
			kt.BackwardMs += v / n
		} else {
			kt.ForwardMs += v / n
		}
	}
	busy := 0.0
	for _, kt := range byKind {
		kt.TotalMs = kt.ForwardMs + kt.BackwardMs
		busy += kt.TotalMs
		r.Kinds = append(r.Kinds, *kt)
	}
	r.Kinds = append(r.Kinds, KindTime{Kind: "gaps", TotalMs: max(0, r.StepMs-busy)})
	for i := range r.Kinds {
		if r.StepMs > 0 {
			r.Kinds[i].Share = r.Kinds[i].TotalMs / r.StepMs
		}
	}
	sort.SliceStable(r.Kinds, func(i, j int) bool { return r.Kinds[i].TotalMs > r.Kinds[j].TotalMs })
	for l := range p.counted {
		r.Layers = append(r.Layers, LayerTime{Name: l, Kind: p.kinds[l], ForwardMs: p.sum[[2]string{"layer:" + l, "f"}] / n, BackwardMs: p.sum[[2]string{"layer:" + l, "b"}] / n})
	}
	sort.Slice(r.Layers, func(i, j int) bool {
		a, b := r.Layers[i], r.Layers[j]
		if a.ForwardMs+a.BackwardMs != b.ForwardMs+b.BackwardMs {
			return a.ForwardMs+a.BackwardMs > b.ForwardMs+b.BackwardMs
		}
		return a.Name < b.Name
	})
	if len(r.Layers) > 40 {
		r.Layers = r.Layers[:40]
	}
	return r
}

// write puts the report where EnvProfile said.
func (p *profiler) write(d *Model) error {
	r := p.report(d)
	if p.out == "1" || p.out == "stderr" {
		r.WriteTable(os.Stderr)
		return nil
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.out, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the device profile (%s): %w", EnvProfile, err)
	}
	return nil
}

// WriteTable writes the profile as a text table: a line per layer kind.
func (r *Profile) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "device profile of %s, batch %d: %.3f ms per step (mean of %d steps after %d warm-up)\n", r.Model, r.Batch, r.StepMs, r.Steps, r.Warmup)
	fmt.Fprintf(w, "%-12s %6s %11s %11s %11s %7s\n", "kind", "layers", "forward ms", "backward ms", "total ms", "share")
	for _, k := range r.Kinds {
		fmt.Fprintf(w, "%-12s %6d %11.3f %11.3f %11.3f %6.1f%%\n", k.Kind, k.Layers, k.ForwardMs, k.BackwardMs, k.TotalMs, 100*k.Share)
	}
}

// layerKinds maps the names of m's layers (as the plan names its ops:
// nn's parameter prefixes) to their kinds.
func layerKinds(m *nn.Model) map[string]string {
	kinds := map[string]string{}
	var walk func(l nn.Layer, name string)
	walk = func(l nn.Layer, name string) {
		switch l := l.(type) {
		case *nn.Sequential:
			for i, c := range l.Layers {
				walk(c, child(name, fmt.Sprint(i)))
			}
			return
		case *nn.Residual:
			kinds[name] = "residual"
			walk(l.Fn, child(name, "fn"))
			return
		case *nn.Linear:
			kinds[name] = "linear"
		case *nn.CausalSelfAttention:
			kinds[name] = "attention"
		case *nn.LayerNorm:
			kinds[name] = "layernorm"
		case *nn.Embedding, *nn.PositionEmbedding:
			kinds[name] = "embedding"
		case *nn.Conv2d:
			kinds[name] = "conv2d"
		case *nn.BatchNorm:
			kinds[name] = "batchnorm"
		case *nn.Dropout:
			kinds[name] = "dropout"
		default:
			t := reflect.TypeOf(l)
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			kinds[name] = strings.ToLower(t.Name())
			if kinds[name] == "maxpool2d" {
				kinds[name] = "maxpool"
			}
		}
	}
	walk(m.Net, "")
	return kinds
}
