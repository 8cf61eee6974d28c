//go:build cgo

package nccl

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/internal/opcheck"
	"github.com/gdist/gdist/gpu/cuda"
)

// Comm is one rank's NCCL communicator, with the comm.Comm methods. It takes
// device buffers on its device only; comm.New(ctx, "nccl", cfg) returns it
// wrapped so that host buffers work too (staging.WrapDevice). The methods
// are safe for concurrent use.
type Comm struct {
	lib        *library
	rank, size int
	reportRank int // the rank named in errors (a p2p channel's parent rank)
	device     int
	opts       comm.Options
	store      comm.Store
	path       string // store key prefix of this communicator
	parent     *Comm  // p2p channels: a failure fails the parent too
	peer       int    // p2p channels: the other rank (the parent's rank)

	// h is the ncclComm_t, 0 once aborted. Launches and other NCCL calls
	// hold hmu shared; abort waits briefly for them (abortWait) and then
	// aborts anyway: a launch blocked connecting to a peer that never
	// comes ends only by the abort.
	hmu sync.RWMutex
	h   atomic.Uintptr

	args     opcheck.Args  // argument checks
	coll     *tracker      // collectives
	busy     chan struct{} // an operation was issued (wakes monitor)
	scratch  uintptr       // 4 bytes of device memory (Barrier)
	devPool  *cuda.Pool
	hostPool *cuda.Pool

	life   context.Context // ends on Close
	finish context.CancelFunc

	hbStop context.CancelFunc // stops the heartbeats (world Comm of several ranks)
	notes  sync.WaitGroup     // failure notices and goodbyes being written to the store

	mu       sync.Mutex
	watched  bool     // failures are published in the store (watch.go)
	self     *tracker // copies of send/recv to this rank (lazily)
	failed   error
	closed   bool
	seq      uint64
	splits   int
	children []*Comm
	chans    map[chanKey]*channel
	selfq    map[int]*selfQueue
}

var _ comm.Comm = (*Comm)(nil)

// Rank is this rank's index in the Comm.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.size }

// Device is the CUDA device of this rank's communicator.
func (c *Comm) Device() int { return c.device }

// DeviceCapable is true: the Comm takes device buffers.
func (c *Comm) DeviceCapable() bool { return true }

// New builds the world Comm of one rank. Rank 0 creates NCCL's unique id and
// publishes it through cfg.Store (which may be nil at world size 1); every
// rank then joins with ncclCommInitRank. The rank uses GPU cfg.LocalRank.
func New(ctx context.Context, cfg comm.Config) (*Comm, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l, err := lib()
	if err != nil {
		return nil, err
	}
	dev, err := deviceFor(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Size > 1 && cfg.Store == nil {
		return nil, comm.InvalidArgf("nccl: world size %d needs a Store to publish the unique id", cfg.Size)
	}
	path := "nccl/" + cfg.Job
	if cfg.Store != nil {
		gen, err := cfg.Store.Add(ctx, path+"/gen/"+strconv.Itoa(cfg.Rank), 1)
		if err != nil {
			return nil, fmt.Errorf("nccl: rank %d: rendezvous: %w", cfg.Rank, err)
		}
		path += "/" + strconv.FormatInt(gen, 10)
	}
	id, err := exchangeID(ctx, l, dev, cfg.Store, path+"/id", cfg.Rank == 0, cfg.Size)
	if err != nil {
		return nil, fmt.Errorf("nccl: rank %d: %w", cfg.Rank, err)
	}
	c, err := open(ctx, l, params{id: id, size: cfg.Size, rank: cfg.Rank, device: dev, opts: cfg.Options,
		store: cfg.Store, path: path, reportRank: cfg.Rank})
	if err != nil {
		return nil, err
	}
	c.startWatch(true)
	if cfg.Size > 1 {
		if err := c.connect(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("nccl: rank %d: connecting the ranks: %w", cfg.Rank, err)
		}
	}
	return c, nil
}

// connect all-reduces one element, so that NCCL connects the ranks at
// setup, bounded by ctx: it connects on demand, inside the launch (since
// NCCL 2.22 at a communicator's first collective), which would otherwise
// make the first collective block until every rank reached it.
func (c *Comm) connect(ctx context.Context) error {
	p := C.uintptr_t(c.scratch)
	w, err := c.issue(ctx, c.coll, "connect", false, func(h, st, ev C.uintptr_t) C.int {
		return C.gdnc_all_reduce(c.lib.c, C.int(c.device), st, ev, h, p, p, 1, ncclTypes[comm.Float32], ncclOps[comm.Sum])
	}, nil)
	if err != nil {
		return err
	}
	return w.Wait(ctx)
}

// deviceFor picks the GPU of a rank: its local rank when the host has a
// GPU per local rank; the only GPU the process sees when the launcher gave
// it that one (CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES naming one
// device: Slurm's --gpus-per-task=1, a one-GPU pod); with GPU sharing
// (EnvShareGPU), local rank k mod the number of GPUs. Otherwise the host has
// too few GPUs: NCCL would refuse ("Duplicate GPU"), so it fails first,
// saying what to do.
func deviceFor(cfg comm.Config) (int, error) {
	if cfg.LocalRank < 0 {
		return 0, comm.InvalidArgf("nccl: rank %d: local rank %d", cfg.Rank, cfg.LocalRank)
	}
	n := cuda.DeviceCount()
	local := max(cfg.LocalSize, cfg.LocalRank+1)
	if n < 1 {
		return 0, fmt.Errorf("%w: rank %d: no CUDA device", ErrUnavailable, cfg.Rank)
	}
	if local <= n {
		return cfg.LocalRank, nil
	}
	if n == 1 && onePerProcess() {
		return 0, nil
	}
	if share, why := shareGPU(); share {
		if why != "" {
			return 0, fmt.Errorf("%w: rank %d: %s", ErrUnavailable, cfg.Rank, why)
		}
		return cfg.LocalRank % n, nil
	}
	return 0, fmt.Errorf("%w: rank %d is local rank %d of %d on this host, which has %d GPU(s); %s",
		ErrUnavailable, cfg.Rank, cfg.LocalRank, local, n, oneGPUPerRank)
}

// exchangeID: the creator makes a unique id and publishes it at key; the
// others wait for it.
func exchangeID(ctx context.Context, l *library, device int, store comm.Store, key string, create bool, size int) ([]byte, error) {
	if create {
		id, err := l.uniqueID(device)
		if err != nil {
			return nil, err
		}
		if size > 1 {
			if err := store.Set(ctx, key, id); err != nil {
				return nil, fmt.Errorf("publishing the unique id: %w", err)
			}
		}
		return id, nil
	}
	id, err := store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("waiting for the unique id: %w", err)
	}
	if len(id) != uniqueIDBytes {
		return nil, fmt.Errorf("%w: unique id at %q has %d bytes, want %d", comm.ErrProtocol, key, len(id), uniqueIDBytes)
	}
	return id, nil
}

type params struct {
	id                     []byte
	size, rank, reportRank int
	device                 int
	opts                   comm.Options
	store                  comm.Store
	path                   string
	parent                 *Comm
	peer                   int // a channel's other rank
}

// open joins the communicator of p.id and sets up the streams and memory.
func open(ctx context.Context, l *library, p params) (*Comm, error) {
	type result struct {
		h   C.uintptr_t
		err error
	}
	done := make(chan result, 1)
	go func() {
		// ncclGetLastError(NULL) may be per thread: ask on the thread
		// that failed.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var h C.uintptr_t
		r := C.gdnc_init(l.c, C.int(p.device), &h, C.int(p.size), (*C.char)(unsafe.Pointer(&p.id[0])), C.int(p.rank))
		done <- result{h, l.err("ncclCommInitRank", r, 0)}
	}()
	var h C.uintptr_t
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("nccl: rank %d of %d on cuda:%d: %w", p.rank, p.size, p.device, r.err)
		}
		h = r.h
	case <-ctx.Done():
		go func() { // abort it once it has joined
			if r := <-done; r.err == nil {
				C.gdnc_abort(l.c, C.int(p.device), r.h)
			}
		}()
		return nil, fmt.Errorf("nccl: rank %d of %d: joining the communicator: %w", p.rank, p.size, ctx.Err())
	}
	c := &Comm{lib: l, rank: p.rank, size: p.size, reportRank: p.reportRank, device: p.device, opts: p.opts,
		store: p.store, path: p.path, parent: p.parent, peer: p.peer,
		devPool: cuda.NewDevicePool(p.device, 256<<20), hostPool: cuda.NewPinnedPool(p.device, 256<<20),
		chans: map[chanKey]*channel{}, selfq: map[int]*selfQueue{}, busy: make(chan struct{}, 1)}
	c.h.Store(uintptr(h))
	c.life, c.finish = context.WithCancel(context.Background())
	c.args = opcheck.Args{Rank: c.rank, Size: c.size, Buf: c.checkBuf}
	var err error
	if c.coll, err = c.newTracker(); err == nil {
		c.scratch, err = cuda.Malloc(p.device, 4)
	}
	if err != nil {
		c.abort()
		c.finish()
		return nil, fmt.Errorf("nccl: rank %d: %w", p.rank, err)
	}
	go c.monitor()
	return c, nil
}

// A tracker is a stream and the Works in flight on it, completed in order by
// a watcher goroutine that polls their events.
type tracker struct {
	c      *Comm
	lmu    sync.Mutex // serializes issue's launches, in the order of their sequence numbers
	stream *cuda.Stream
	legacy *cuda.Event // scratch: marks the default stream
	events []*cuda.Event
	// dead are the events of works failed before the watcher saw them
	// done (a failure, Close): never reused, destroyed by cleanup once
	// the watcher has exited (it may be waiting for one)
	dead      []*cuda.Event
	exited    chan struct{} // closed when watch returns
	pending   []*work
	launching *work // being launched (c.mu)
	wake      chan struct{}

	waiter cuda.Waiter // await's (watcher only; its Stats for the tests)
}

func (c *Comm) newTracker() (*tracker, error) {
	s, err := cuda.NewStream(c.device, true)
	if err != nil {
		return nil, err
	}
	ev, err := cuda.NewEvent(c.device)
	if err != nil {
		s.Destroy()
		return nil, err
	}
	t := &tracker{c: c, stream: s, legacy: ev, wake: make(chan struct{}, 1), exited: make(chan struct{})}
	go t.watch()
	return t, nil
}

// work is an operation in flight on a tracker.
type work struct {
	reqs     []*comm.Request
	ev       *cuda.Event
	name     string
	seq      uint64
	release  func(ok bool)
	stop     atomic.Pointer[func() bool]
	cancel   context.CancelFunc
	done     atomic.Bool
	launched atomic.Bool // the launch call returned
}

// finish completes w once: its requests, its timer, its memory.
func (w *work) finish(err error) {
	if w.done.Swap(true) {
		return
	}
	if stop := w.stop.Load(); stop != nil {
		(*stop)()
	}
	if w.cancel != nil {
		w.cancel()
	}
	if w.release != nil {
		w.release(err == nil)
	}
	for _, r := range w.reqs {
		r.Complete(err)
	}
}

func (c *Comm) opErr(w *work, err error) error {
	return &comm.OpError{Op: w.name, Seq: w.seq, Rank: c.reportRank, Err: err}
}

// errLocked is why no operation may start (c.mu held), or nil.
func (c *Comm) errLocked(name string, seq uint64) error {
	switch {
	case c.closed:
		return &comm.OpError{Op: name, Seq: seq, Rank: c.reportRank, Err: comm.ErrClosed}
	case c.failed != nil:
		return &comm.OpError{Op: name, Seq: seq, Rank: c.reportRank, Err: c.failed}
	}
	return nil
}

type launchFn func(h, st, ev C.uintptr_t) C.int

// issue enqueues an operation on t's stream with launch and returns a Work
// that completes when the stream has done it. release (if not nil) gets the
// operation's temporary memory back: ok says whether it may be reused.
//
// The launch may block: NCCL connects on demand, inside the launch, on the
// first send/recv between two ranks (and, since NCCL 2.22, a collective's
// first use of an algorithm), until the peer launches its side. So the
// operation's timeout starts before the launch, c.mu is not held during it
// (t.lmu keeps the launches in sequence order), and a failure meanwhile
// (timeout, lost peer, Close) fails the operation and aborts the
// communicator, which ends the launch. issue then returns the failed Work.
func (c *Comm) issue(ctx context.Context, t *tracker, name string, coll bool, launch launchFn, release func(bool)) (comm.Work, error) {
	if ctx == nil {
		if release != nil {
			release(true)
		}
		return nil, comm.InvalidArgf("%s: nil context", name)
	}
	t.lmu.Lock()
	defer t.lmu.Unlock()
	c.mu.Lock()
	w, ev, err := c.prepareLocked(ctx, t, name, coll, release, nil)
	if err == nil {
		t.launching = w
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	err = c.launch(w, t, ev, launch)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err = c.launchedLocked(w, t, ev, err); err != nil {
		return nil, err
	}
	return w.reqs[0], nil
}

// issueLocked is issue with c.mu held, launching under it (for launches
// that do not wait for a peer: copies, and receives on a channel whose
// peer's message has come); extra, if not nil, completes with the Work.
func (c *Comm) issueLocked(ctx context.Context, t *tracker, name string, coll bool, launch launchFn, release func(bool), extra *comm.Request) (*work, error) {
	w, ev, err := c.prepareLocked(ctx, t, name, coll, release, extra)
	if err != nil {
		return nil, err
	}
	err = c.launch(w, t, ev, launch)
	if err = c.launchedLocked(w, t, ev, err); err != nil {
		return nil, err
	}
	return w, nil
}

// prepareLocked makes the Work of an operation about to be launched and
// starts its timeout (c.mu held).
func (c *Comm) prepareLocked(ctx context.Context, t *tracker, name string, coll bool, release func(bool), extra *comm.Request) (*work, *cuda.Event, error) {
	if err := c.errLocked(name, 0); err != nil {
		if release != nil {
			release(true)
		}
		return nil, nil, err
	}
	var seq uint64
	if coll {
		c.seq++
		seq = c.seq
	}
	w := &work{reqs: []*comm.Request{comm.NewRequest()}, name: name, seq: seq, release: release}
	if extra != nil {
		w.reqs = append(w.reqs, extra)
	}
	var ev *cuda.Event
	var err error
	if n := len(t.events); n > 0 {
		ev, t.events = t.events[n-1], t.events[:n-1]
	} else if ev, err = cuda.NewBlockingEvent(c.device); err != nil {
		err = fmt.Errorf("nccl: %s: %w", name, err)
		if release != nil {
			release(true)
		}
		c.failLocked(err) // the ranks now disagree on what was issued
		return nil, nil, c.opErr(w, err)
	}
	octx, cancel := opcheck.Context(ctx, c.life, c.opts.OpTimeout())
	w.cancel = cancel
	stop := context.AfterFunc(octx, func() { c.expire(w, ctx) })
	w.stop.Store(&stop)
	return w, ev, nil
}

// launch runs w's launch and records its event.
func (c *Comm) launch(w *work, t *tracker, ev *cuda.Event, launch launchFn) error {
	c.hmu.RLock()
	h := C.uintptr_t(c.h.Load())
	var err error
	if h == 0 {
		err = fmt.Errorf("nccl: %s: the communicator was aborted", w.name)
	} else {
		r := launch(h, C.uintptr_t(t.stream.Handle()), C.uintptr_t(t.legacy.Handle()))
		err = c.lib.err(w.name, r, h)
	}
	c.hmu.RUnlock()
	w.launched.Store(true)
	if err == nil {
		err = ev.Record(t.stream)
	}
	return err
}

// launchedLocked completes issuing w after its launch returned with err
// (c.mu held): w is pending, or failed. The error is returned only when the
// launch itself failed before anything else failed w.
func (c *Comm) launchedLocked(w *work, t *tracker, ev *cuda.Event, err error) error {
	if t.launching == w {
		t.launching = nil
	}
	switch {
	case w.done.Load() || c.failed != nil && err == nil:
		// Failed while launching (timeout, lost peer, Close): w has its
		// error, or gets the Comm's; the event may still be recorded.
		if !w.done.Load() {
			go w.finish(c.opErr(w, c.failed))
		}
		t.dead = append(t.dead, ev)
		return nil
	case err != nil:
		// The ranks now disagree on what was issued: nothing can be trusted.
		if c.failed != nil { // the launch failed because of it
			err = c.failed
		}
		c.failLocked(err)
		w.finish(c.opErr(w, err))
		t.dead = append(t.dead, ev)
		return c.opErr(w, err)
	}
	w.ev = ev
	t.pending = append(t.pending, w)
	select {
	case t.wake <- struct{}{}:
	default:
	}
	select {
	case c.busy <- struct{}{}:
	default:
	}
	return nil
}

// expire fails the Comm when an operation's context ends before it is done:
// NCCL cannot cancel one operation, so the communicator is aborted.
func (c *Comm) expire(w *work, user context.Context) {
	if w.done.Load() {
		return
	}
	err := c.ctxErr(w.name, user)
	if !w.launched.Load() && !errors.Is(err, comm.ErrClosed) {
		err = fmt.Errorf("%w (NCCL was still connecting: %s never launched the matching operation)", err, c.peerNote())
	}
	c.fail(err)
	w.finish(c.opErr(w, err))
}

// ctxErr explains why an operation's context ended.
func (c *Comm) ctxErr(name string, user context.Context) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	switch {
	case closed:
		return comm.ErrClosed
	case user.Err() != nil:
		return fmt.Errorf("%w: %s did not finish before its context ended; the NCCL communicator was aborted", user.Err(), name)
	}
	return fmt.Errorf("%w: %s did not finish within %v; the NCCL communicator was aborted", comm.ErrTimeout, name, c.opts.OpTimeout())
}

// watch completes t's works in order as their events complete.
func (t *tracker) watch() {
	defer close(t.exited)
	c := t.c
	for {
		c.mu.Lock()
		var w *work
		if len(t.pending) > 0 {
			w = t.pending[0]
		}
		c.mu.Unlock()
		if w == nil {
			select {
			case <-t.wake:
				continue
			case <-c.life.Done():
				return
			}
		}
		err := t.await(w)
		c.mu.Lock()
		if len(t.pending) == 0 || t.pending[0] != w { // failed meanwhile
			c.mu.Unlock()
			continue
		}
		t.pending = t.pending[1:]
		if err == nil {
			t.events = append(t.events, w.ev)
		} else {
			t.dead = append(t.dead, w.ev)
		}
		c.mu.Unlock()
		if err != nil {
			c.fail(err)
		}
		w.finish(err)
	}
}

// await waits for w's event with the tracker's cuda.Waiter: polling it
// briefly (an adaptive spin, shrinking on a stream whose operations wait
// for slow peers or share the GPU and the cores with other ranks), then
// blocking in the driver (the event has cudaEventBlockingSync: the thread
// sleeps until the device signals it, no core spins). Faults are not the
// watcher's to find: the monitor (ncclCommGetAsyncError), the peer watch
// (watch.go) and each operation's timer (expire) fail the Comm and abort
// the communicator, which ends NCCL's kernels, so a blocked wait returns
// (the failed Work has completed already).
func (t *tracker) await(w *work) error {
	if err := t.waiter.Wait(w.ev, w.done.Load); err != nil {
		return fmt.Errorf("nccl: %s: %w", w.name, err)
	}
	return nil
}

// monitorEvery is how often NCCL's asynchronous error is checked while
// operations are pending.
const monitorEvery = 10 * time.Millisecond

// monitor polls ncclCommGetAsyncError while operations are pending (a lost
// peer leaves NCCL's kernels waiting forever; the error is how one learns
// of it) and fails the Comm when there is one.
func (c *Comm) monitor() {
	for {
		select {
		case <-c.life.Done():
			return
		case <-c.busy:
		}
		for c.pending() {
			select {
			case <-c.life.Done():
				return
			case <-time.After(monitorEvery):
			}
			if err := c.asyncError(); err != nil {
				if err = c.namePeer(err); err != nil {
					c.fail(err)
				}
			}
		}
	}
}

func (c *Comm) pending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.coll.pending) > 0 || c.self != nil && len(c.self.pending) > 0
}

// asyncError is the communicator's asynchronous error (a failed peer or
// network), or nil.
func (c *Comm) asyncError() error {
	c.hmu.RLock()
	defer c.hmu.RUnlock()
	h := C.uintptr_t(c.h.Load())
	if h == 0 {
		return nil
	}
	var res C.int
	if r := C.gdnc_async_error(c.lib.c, h, &res); r != ncclSuccess {
		return c.lib.err("ncclCommGetAsyncError", r, h)
	}
	if res == ncclSuccess || res == ncclInProgress {
		return nil
	}
	return fmt.Errorf("nccl: asynchronous error on rank %d: %w", c.reportRank, c.lib.err("communicator", res, h))
}

// abortWait is how long abort waits for NCCL calls in progress on the
// communicator to return before it aborts anyway: they take microseconds,
// unless a launch is blocked connecting to a peer, which only the abort
// ends (ncclCommAbort from another thread ends a blocked ncclGroupEnd).
const abortWait = 50 * time.Millisecond

// abort aborts the NCCL communicator (once): pending work ends, and so
// does a launch blocked connecting to a peer.
func (c *Comm) abort() {
	h := c.h.Swap(0) // no NCCL call starts after this
	if h == 0 {
		return
	}
	for deadline := time.Now().Add(abortWait); ; time.Sleep(100 * time.Microsecond) {
		if c.hmu.TryLock() {
			c.hmu.Unlock()
			break
		}
		if time.Now().After(deadline) {
			break
		}
	}
	C.gdnc_abort(c.lib.c, C.int(c.device), C.uintptr_t(h))
}

// peerNote names the peer(s) an operation of this communicator waits for.
func (c *Comm) peerNote() string {
	if c.parent != nil {
		return fmt.Sprintf("rank %d", c.peer)
	}
	return "a peer"
}

// fail poisons the Comm with err (the first error wins), aborts the
// communicator and fails every pending operation.
func (c *Comm) fail(err error) {
	c.mu.Lock()
	c.failLocked(err)
	c.mu.Unlock()
}

// failLocked is fail with c.mu held. Later operations see the error at
// once; the abort and the failing of pending operations run in a goroutine
// (they may take a while and need no lock).
func (c *Comm) failLocked(err error) {
	if c.failed != nil {
		return
	}
	c.failed = err
	if c.watched {
		c.publish(err)
	}
	var ws []*work
	for _, t := range []*tracker{c.coll, c.self} {
		if t != nil {
			ws = append(ws, t.pending...)
			for _, w := range t.pending {
				t.dead = append(t.dead, w.ev)
			}
			t.pending = nil
			if t.launching != nil {
				ws = append(ws, t.launching)
			}
		}
	}
	var selfOps []*selfOp
	var recvs []*recvOp
	for tag, q := range c.selfq {
		selfOps = append(selfOps, q.ops...)
		delete(c.selfq, tag)
	}
	var chans []*channel
	for _, ch := range c.chans {
		chans = append(chans, ch)
		for tag, q := range ch.recvs {
			recvs = append(recvs, q...)
			delete(ch.recvs, tag)
		}
		ch.nrecv = 0
	}
	parent := c.parent
	var children []*Comm
	if errors.Is(err, comm.ErrPeerLost) { // a lost process breaks every group it is in
		children = append(children, c.children...)
	}
	go func() {
		for _, ch := range children {
			ch.fail(remoteError{err})
		}
		c.abort()
		for _, w := range ws {
			w.finish(c.opErr(w, err)) // release(false): aborted work may still touch its memory
		}
		for _, o := range selfOps {
			o.fail(c, err)
		}
		for _, o := range recvs {
			o.fail(c, err)
		}
		for _, ch := range chans {
			ch.fail(err)
		}
		if parent != nil {
			parent.fail(err)
		}
	}()
}

// Close aborts the NCCL communicator (which never hangs, unlike its
// destruction, which waits for the peers), fails pending operations with
// comm.ErrClosed and closes the sub-groups made by Split. The device memory
// and streams are released in the background once the device is done with
// them.
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	children := c.children
	c.children = nil
	c.mu.Unlock()
	for _, ch := range children {
		ch.Close()
	}
	c.goodbye()
	c.fail(comm.ErrClosed)
	c.mu.Lock()
	var chans []*channel
	for _, ch := range c.chans {
		chans = append(chans, ch)
	}
	self := c.self
	c.mu.Unlock()
	for _, ch := range chans {
		ch.close()
	}
	c.finish()
	go c.cleanup(self)
	c.awaitNotes()
	return nil
}

// cleanup frees the Comm's device resources once its streams are idle (or
// leaks them if they never become idle).
func (c *Comm) cleanup(self *tracker) {
	ts := []*tracker{c.coll}
	if self != nil {
		ts = append(ts, self)
	}
	deadline := time.Now().Add(time.Minute)
	for _, t := range ts {
		ev, err := cuda.NewEvent(c.device)
		if err != nil {
			return
		}
		if err := ev.Record(t.stream); err != nil {
			return
		}
		for {
			done, err := ev.Query()
			if err != nil || time.Now().After(deadline) {
				return
			}
			if done {
				break
			}
			time.Sleep(time.Millisecond)
		}
		ev.Destroy()
		select { // the watcher may still hold a failed work's event
		case <-t.exited:
		case <-time.After(time.Until(deadline)):
			return
		}
	}
	for _, t := range ts {
		c.mu.Lock()
		evs := append(t.events, t.dead...)
		t.events, t.dead = nil, nil
		c.mu.Unlock()
		for _, ev := range evs {
			ev.Destroy()
		}
		t.legacy.Destroy()
		t.stream.Destroy()
	}
	cuda.Free(c.device, c.scratch)
	c.devPool.Close()
	c.hostPool.Close()
}
