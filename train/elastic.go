package train

// Periodic saves and restarts: what a job needs to survive a lost worker.
// -save-every saves mid-epoch (a Position in the middle of an epoch
// resumes exactly: the sampler is a function of the seed, the epoch and
// the batch index), and a restarted generation (Config.Restarts > 0)
// resumes from the latest complete checkpoint by itself. In a job that
// may be restarted, rank 0 keeps the step it reached in <save>.progress,
// so a restart can say how many steps it recomputes; a run that ends
// normally removes it.

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/internal/hugepage"
	"github.com/gdist/gdist/models"
)

// saver saves the run's checkpoints, at most once per step, and times
// how long training stands still for them.
//
// With a strategy that can snapshot (Snapshotter: DDP, ZeRO, the
// pipeline), a save copies what it writes and the writing goes on in the
// background while training continues: the saver's status rides on the
// all-reduce every step does anyway (checkStep), and once every rank has
// finished one phase of the writing (ZeRO: the shard files) the next
// starts (rank 0's model file, whose atomic rename commits the save). A
// save finishes before the next one starts, and at the end of the run. A
// crash while writing leaves the previous checkpoint, as with a
// synchronous save. The stall is the snapshot (a copy in memory), not the
// write.
type saver struct {
	strat Strategy
	c     comm.Comm
	lead  bool // rank 0: keeps and prunes older checkpoints
	keep  int  // checkpoints to keep (Config.Keep)
	sync  bool // write before going on (Config.SyncSave, or no Snapshotter)
	path  string
	meta  map[string]string
	last  int64 // step of the last save; -1: none yet
	n     int
	max   time.Duration
	total time.Duration
	pend  *pendingSave
	// nonFinite names what is not finite in the state this rank would
	// save, or returns "" (stateNonFinite): every save checks first.
	nonFinite func() string
}

// Snapshotter is what a strategy implements for saves that do not stop
// training: SnapshotSave copies (a collective, quick) what Save would
// write at pos and returns this rank's part of each phase of the writing
// (nil: nothing); every rank returns as many phases, and a phase starts
// once every rank finished the one before.
type Snapshotter interface {
	SnapshotSave(ctx context.Context, path string, pos Position, meta map[string]string) ([]func() error, error)
}

// pendingSave is a save being written.
type pendingSave struct {
	step   int64
	phases []func() error
	phase  int
	done   chan error // the running phase's result
	ended  bool       // the running phase ended here (err holds how)
	err    error
}

// start runs the current phase in the background.
func (p *pendingSave) start() {
	p.done = make(chan error, 1)
	p.ended, p.err = false, nil
	ph := p.phases[p.phase]
	if ph == nil {
		p.done <- nil
		return
	}
	go func() { p.done <- ph() }()
}

// poll reports this rank's status of the running phase without waiting:
// 1 ended well, 0 still running, -1 failed.
func (p *pendingSave) poll() int32 {
	if !p.ended {
		select {
		case p.err = <-p.done:
			p.ended = true
		default:
			return 0
		}
	}
	if p.err != nil {
		return -1
	}
	return 1
}

// wait waits for the running phase to end here.
func (p *pendingSave) wait() {
	if !p.ended {
		p.err = <-p.done
		p.ended = true
	}
}

func newSaver(strat Strategy, c comm.Comm, cfg Config, meta map[string]string, m *models.Model) *saver {
	_, async := strat.(Snapshotter)
	return &saver{strat: strat, c: c, lead: c.Rank() == 0, keep: max(cfg.Keep, 1), sync: cfg.SyncSave || !async,
		path: cfg.Save, meta: meta, last: -1, nonFinite: func() string { return stateNonFinite(strat, m) }}
}

// save saves at pos unless there is no -save path or pos's step is saved
// already. Collective. With snapshots it returns once the copy is taken;
// finish waits for the writing.
func (s *saver) save(ctx context.Context, pos Position) error {
	if s.path == "" || pos.Step == s.last {
		return nil
	}
	t0 := time.Now()
	if err := s.finish(ctx); err != nil {
		return err
	}
	// Nothing non-finite is ever saved: the last checkpoint stays.
	if err := checkFinite(ctx, s.c, s.nonFinite(), pos.Step, s.path); err != nil {
		return err
	}
	if s.lead && s.keep > 1 {
		keepCurrent(s.path)
	}
	if s.sync {
		if err := s.strat.Save(ctx, s.path, pos, s.meta); err != nil {
			return saveFailed(err, s.path)
		}
		if s.lead && s.keep > 1 {
			pruneKept(s.path, s.keep)
		}
	} else {
		phases, err := s.strat.(Snapshotter).SnapshotSave(ctx, s.path, pos, s.meta)
		if err != nil {
			return err
		}
		s.pend = &pendingSave{step: pos.Step, phases: phases}
		s.pend.start()
	}
	d := time.Since(t0)
	s.last = pos.Step
	s.n++
	s.total += d
	s.max = max(s.max, d)
	return nil
}

// status is this rank's part of the per-step all-reduce (Min): 1 when no
// save is being written or this rank's part of its phase ended well, 0
// while it runs, -1 when it failed.
func (s *saver) status() int32 {
	if s.pend == nil {
		return 1
	}
	return s.pend.poll()
}

// advance acts on the all-reduced status of every rank: the next phase
// when all ended well, an error naming the rank when one failed.
// Collective when a rank failed.
func (s *saver) advance(ctx context.Context, all int32) error {
	switch {
	case s.pend == nil || all == 0:
		return nil
	case all < 0:
		return s.failed(ctx)
	}
	s.pend.phase++
	if s.pend.phase < len(s.pend.phases) {
		s.pend.start()
		return nil
	}
	s.pend = nil
	if s.lead && s.keep > 1 {
		pruneKept(s.path, s.keep)
	}
	return nil
}

// failed ends a save some rank failed to write, with an error naming that
// rank on every rank. Collective.
func (s *saver) failed(ctx context.Context) error {
	p := s.pend
	s.pend = nil
	p.wait()
	if err := agree(ctx, s.c, p.err, fmt.Sprintf("the checkpoint of step %d to %s", p.step, s.path)); err != nil {
		return saveFailed(err, s.path)
	}
	return nil
}

// finish writes the pending save to the end, waiting for it. Collective.
func (s *saver) finish(ctx context.Context) error {
	for s.pend != nil {
		s.pend.wait()
		st := s.pend.poll()
		all := []int32{st}
		if err := comm.Run(ctx)(s.c.AllReduce(ctx, comm.FromSlice(all), comm.Min)); err != nil {
			return fmt.Errorf("train: finishing the checkpoint of step %d: %w", s.pend.step, err)
		}
		if err := s.advance(ctx, all[0]); err != nil {
			return err
		}
	}
	return nil
}

// abandon waits for this rank's running write, if any, without the
// others (Run is failing): no file is written after Run returns.
func (s *saver) abandon() {
	if s.pend != nil {
		s.pend.wait()
		s.pend = nil
	}
}

// report fills in the summary's save figures.
func (s *saver) report(sum *Summary) {
	sum.Saves = s.n
	if s.n > 0 {
		sum.SaveMsMean = s.total.Seconds() * 1e3 / float64(s.n)
		sum.SaveMsMax = s.max.Seconds() * 1e3
	}
}

// SnapshotBuffers keeps the float32 buffers of a strategy's save
// snapshots (SnapshotFull, SnapshotZero) from one save to the next: a
// large model's snapshot is hundreds of MB, and memory fresh from the OS
// costs more to fill (page faults, zeroing) than the copy itself. The
// zero value is ready to use; safe for concurrent use; a nil
// *SnapshotBuffers allocates.
type SnapshotBuffers struct {
	mu   sync.Mutex
	free map[int][][]float32
}

// get returns a buffer of n values (contents undefined).
func (b *SnapshotBuffers) get(n int) []float32 {
	if b == nil {
		return hugepage.Float32s(n)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if l := b.free[n]; len(l) > 0 {
		buf := l[len(l)-1]
		b.free[n] = l[:len(l)-1]
		return buf
	}
	return hugepage.Float32s(n)
}

// put gives buffers back.
func (b *SnapshotBuffers) put(bufs [][]float32) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.free == nil {
		b.free = map[int][][]float32{}
	}
	for _, buf := range bufs {
		b.free[len(buf)] = append(b.free[len(buf)], buf)
	}
}

// hold starts a set of buffers handed out together and given back
// together (release), when the save that uses them is written.
func (b *SnapshotBuffers) hold() *heldBufs { return &heldBufs{pool: b} }

// heldBufs are the buffers of one snapshot.
type heldBufs struct {
	pool *SnapshotBuffers
	bufs [][]float32
}

func (h *heldBufs) get(n int) []float32 {
	buf := h.pool.get(n)
	h.bufs = append(h.bufs, buf)
	return buf
}

// release gives the buffers back to the pool: the snapshot is written.
func (h *heldBufs) release() {
	h.pool.put(h.bufs)
	h.bufs = nil
}

// progressFile records, for restarts, the last step rank 0 completed and
// the steps recomputed so far: "<reached> <recomputed>\n", fixed width, so
// one write per step replaces it.
type progressFile struct {
	f          *os.File
	recomputed int64
	buf        []byte
}

// progressPath is the progress file of the checkpoint at save.
func progressPath(save string) string { return save + ".progress" }

// openProgress opens rank 0's progress file for a run resuming at step
// resumed; with restarted (a restarted generation) it adds the steps the
// failed generation ran past resumed to the recomputed count.
func openProgress(save string, resumed int64, restarted bool) (*progressFile, error) {
	p := &progressFile{}
	if restarted {
		var reached, before int64
		if b, err := os.ReadFile(progressPath(save)); err == nil {
			if _, err := fmt.Sscan(string(b), &reached, &before); err == nil && reached >= resumed {
				p.recomputed = before + reached - resumed
			}
		}
	}
	f, err := os.OpenFile(progressPath(save), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("train: progress file: %w", err)
	}
	p.f = f
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("train: progress file: %w", err)
	}
	return p, p.step(resumed)
}

// step records that rank 0 completed step.
func (p *progressFile) step(step int64) error {
	if p == nil {
		return nil
	}
	p.buf = fmt.Appendf(p.buf[:0], "%20d %20d\n", step, p.recomputed)
	if _, err := p.f.WriteAt(p.buf, 0); err != nil {
		return fmt.Errorf("train: progress file: %w", err)
	}
	return nil
}

func (p *progressFile) close() {
	if p != nil {
		p.f.Close()
	}
}

// remove closes and removes the progress file: the run is over.
func (p *progressFile) remove() {
	if p != nil {
		p.f.Close()
		os.Remove(p.f.Name())
	}
}
