package pp

import (
	"context"
	"math/rand"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/pipeline"
)

func TestMain(m *testing.M) { os.Exit(cudafake.Main(m)) }

// pipeRun trains mlp 4 steps as a 2-stage device pipeline (1F1B, 3
// micro-batches of 3, 3 and 2), the ranks goroutines on the fake's one
// GPU over inproc (staged through pinned memory), SGD with momentum, and
// returns rank 0's losses, both stages' parameters (in the flat layout)
// and their Stats.
func pipeRun(t *testing.T) ([]float64, []float32, [2]pipeline.Stats) {
	t.Helper()
	const k, batch, micro, steps = 2, 8, 3, 4
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs, err := inproc.New(k, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg     sync.WaitGroup
		errs   [k]error
		losses []float64
		params []float32
		stats  [k]pipeline.Stats
		mu     sync.Mutex
	)
	for r := range cs {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			defer cs[r].Close()
			errs[r] = func() error {
				m, err := models.New("mlp", 3)
				if err != nil {
					return err
				}
				bounds, err := pipeline.Split(ctx, cs[r], m, k, "params", batch/micro+1)
				if err != nil {
					return err
				}
				p, err := newDevicePipe(ctx, deviceComm(cs[r]), m, bounds, micro, "1f1b", batch, 0,
					devmodel.Config{Optim: optim.Config{Name: "sgd", LR: 0.05, Momentum: 0.9}})
				if err != nil {
					return err
				}
				defer p.Close()
				if err := p.connect(ctx); err != nil {
					return err
				}
				// two batches, in turn
				rng := rand.New(rand.NewSource(11))
				var xs [2][]float32
				var ys [2][]int32
				for b := range xs {
					xs[b], ys[b] = make([]float32, batch*m.InputSize()), make([]int32, batch)
					for j := range xs[b] {
						xs[b][j] = rng.Float32()
					}
					for j := range ys[b] {
						ys[b][j] = int32(rng.Intn(m.Classes()))
					}
				}
				for i := 0; i < steps; i++ {
					x, y := xs[i%2], ys[i%2]
					l, err := p.Step(ctx, x, y)
					if err != nil {
						return err
					}
					p.st.SetLR(0.05)
					if err := p.st.Update(); err != nil {
						return err
					}
					if err := p.st.ZeroGrad(); err != nil {
						return err
					}
					if r == 0 {
						losses = append(losses, l)
					}
				}
				if err := p.st.CopyToHost(); err != nil {
					return err
				}
				stats[r] = p.Stats()
				mu.Lock()
				defer mu.Unlock()
				if params == nil {
					params = make([]float32, len(m.Flat.Value))
				}
				copy(params[p.st.Off:p.st.Off+p.st.N], m.Flat.Value[p.st.Off:p.st.Off+p.st.N])
				return nil
			}()
			if errs[r] != nil {
				comm.Abort(cs[r], errs[r])
			}
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return losses, params, stats
}

// TestDevicePipeOrdering: the device pipeline does not wait for its
// stream between ops; its hand-overs (the batch and labels up from pinned
// memory, activations and gradients staged to the other stage, the
// losses down) are ordered by events and the streams alone (each stage's
// stream is non-blocking: a send's staging waits for an After event
// recorded on it). With every copy and memset of the fake slowed by 2 ms,
// or every kernel and GEMM by 1 ms (the stages' streams far behind the
// host, so that a hand-over not ordered reads stale or unfinished data),
// the losses and parameters are bit for bit those of a run at full
// speed; the ops are timed on the device (every op's time, a busy time,
// a bubble within [0, 1]).
func TestDevicePipeOrdering(t *testing.T) {
	cudafake.RequireFake(t)
	fastL, fastP, stats := pipeRun(t)
	for _, slow := range []string{"copies", "kernels"} {
		if slow == "copies" {
			cudafake.CopyDelay(t, 2*time.Millisecond)
		} else {
			cudafake.KernelDelay(t, time.Millisecond)
		}
		slowL, slowP, _ := pipeRun(t)
		cudafake.CopyDelay(t, 0)
		cudafake.KernelDelay(t, 0)
		if len(fastL) != 4 || len(slowL) != 4 {
			t.Fatalf("losses: %v, %v", fastL, slowL)
		}
		for i := range fastL {
			if fastL[i] != slowL[i] {
				t.Errorf("step %d: loss %v with slow %s, %v without", i, slowL[i], slow, fastL[i])
			}
		}
		for i := range fastP {
			if fastP[i] != slowP[i] {
				t.Fatalf("parameter %d: %v with slow %s, %v without", i, slowP[i], slow, fastP[i])
			}
		}
	}
	if fastL[2] >= fastL[0] || fastL[3] >= fastL[1] {
		t.Errorf("losses %v: no progress", fastL)
	}
	for r, st := range stats {
		if st.Steps != 4 || len(st.OpTimes) != 4 || st.Busy <= 0 || st.Idle < 0 {
			t.Errorf("stage %d: stats %+v", r, st)
			continue
		}
		for j, ts := range st.OpTimes {
			if want := []int{6, 3}[r]; len(ts) != want { // the last stage's ops: forward and backward
				t.Errorf("stage %d: step %d: %d op times, want %d", r, j, len(ts), want)
			}
		}
	}
	t.Logf("losses %v; stage 0 busy %v idle %v, stage 1 busy %v idle %v", fastL, stats[0].Busy, stats[0].Idle, stats[1].Busy, stats[1].Idle)
}

// Issue 28 follow-up: a device stage's Close whose stream does not
// finish (its work held by the fake, as a kernel waits for a peer that
// never comes) does not hang: it waits deviceCloseWait, aborts the Comm
// (which ends NCCL's kernels) and waits again; the stream still busy, it
// frees nothing (the held work may still touch the stage's memory) and
// says so, naming the stage. Before, Close synchronized the stream with
// no bound.
func TestDevicePipeCloseBounded(t *testing.T) {
	cudafake.RequireFake(t)
	if !cuda.HasHostFunc() {
		t.Skip("no cudaLaunchHostFunc")
	}
	defer func(d time.Duration) { deviceCloseWait = d }(deviceCloseWait)
	deviceCloseWait = 200 * time.Millisecond
	const batch, micro = 8, 2
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := inproc.New(1, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs[0].Close()
	m, err := models.New("mlp", 3)
	if err != nil {
		t.Fatal(err)
	}
	bounds, err := pipeline.Split(ctx, cs[0], m, 1, "params", batch/micro+1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newDevicePipe(ctx, deviceComm(cs[0]), m, bounds, micro, "1f1b", batch, 0,
		devmodel.Config{Optim: optim.Config{Name: "sgd", LR: 0.05}})
	if err != nil {
		t.Fatal(err)
	}
	cudafake.Gate(t, false)
	opened := false
	defer func() {
		if !opened {
			cudafake.Gate(t, true)
		}
	}()
	if err := p.stream().LaunchHostFunc(cudafake.HoldFunc(t), 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		cudafake.Gate(t, true)
		opened = true
		<-done
		t.Fatal("Close with the stage's stream held did not return within 30s")
	}
	t.Logf("Close: %v", err)
	if err == nil || !strings.Contains(err.Error(), "stage 0") || !strings.Contains(err.Error(), "not freed") {
		t.Errorf("Close with the stage's stream held: %v, want an error naming stage 0 and saying nothing was freed", err)
	}
	if _, err := cs[0].Barrier(ctx); err == nil {
		t.Errorf("a barrier after Close aborted the Comm succeeded")
	}
	cudafake.Gate(t, true)
	opened = true
	if err := p.stream().Synchronize(); err != nil {
		t.Fatal(err)
	}
}
