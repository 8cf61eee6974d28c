package syncbn_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	_ "github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/comm/rendezvous"
	"github.com/gdist/gdist/comm/staging"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/syncbn"
	"golang.org/x/sync/errgroup"
)

func TestMain(m *testing.M) { os.Exit(cudafake.Main(m)) }

// ncclRanks makes n ranks of the nccl backend (goroutines; rank r on GPU
// r), or skips.
func ncclRanks(t testing.TB, n int) []comm.Comm {
	t.Helper()
	cudafake.RequireCUDA(t)
	if cuda.DeviceCount() < n {
		t.Skipf("needs %d GPUs, has %d", n, cuda.DeviceCount())
	}
	cs, closeAll, err := newNCCL(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	return cs
}

// newNCCL makes n ranks of the nccl backend (goroutines; rank r on GPU r)
// over a rendezvous store of their own; closeAll closes them and it.
func newNCCL(n int) (cs []comm.Comm, closeAll func(), err error) {
	token := []byte("syncbn-test")
	srv, err := rendezvous.NewServer("127.0.0.1:0", token, func(string, ...any) {})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs = make([]comm.Comm, n)
	var g errgroup.Group
	for r := range cs {
		g.Go(func() error {
			st, err := rendezvous.Dial(ctx, srv.Addr(), token)
			if err != nil {
				return err
			}
			cs[r], err = comm.New(ctx, "nccl", comm.Config{Rank: r, Size: n, LocalRank: r, LocalSize: n, Store: st, Job: "syncbn"})
			return err
		})
	}
	closeAll = func() {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
		srv.Close()
	}
	if err := g.Wait(); err != nil {
		closeAll()
		return nil, nil, err
	}
	return cs, closeAll, nil
}

func f64bytes(v []float64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 8*len(v))
}

// forwardRecord is rank r's [sum x (C), M2 (C), count] of a batch of
// count samples whose channels have large means (Chan's formula matters)
// and ranks' means differ; rank 1's batch is empty (count 0).
func forwardRecord(r, c int) []float64 {
	n := []float64{5, 0, 7, 3}[r%4]
	buf := make([]float64, 2*c+1)
	for ch := 0; ch < c; ch++ {
		mean := 1e4 + 1.37*float64(ch) + float64(r)*(0.37+0.013*float64(ch))
		buf[ch] = mean * n
		buf[c+ch] = n * (0.25 + 0.01*math.Sqrt(float64(ch*r+1)))
	}
	buf[2*c] = n
	return buf
}

// hostForward is what Syncer's host hook makes of the records: the
// means sent, Combine, the sums rebuilt.
func hostForward(recs [][]float64, c int) []float64 {
	p := len(recs)
	all := make([]float64, 0, p*(2*c+1))
	for _, b := range recs {
		n := b[2*c]
		mine := make([]float64, 2*c+1)
		mine[0] = n
		for ch := 0; ch < c; ch++ {
			if n > 0 {
				mine[1+ch] = b[ch] / n
			}
			mine[1+c+ch] = b[c+ch]
		}
		all = append(all, mine...)
	}
	count, mean, m2 := syncbn.Combine(all, p, c)
	out := make([]float64, 2*c+1)
	for ch := 0; ch < c; ch++ {
		out[ch] = mean[ch] * count
		out[c+ch] = m2[ch]
	}
	out[2*c] = count
	return out
}

// Issue 28: the device hook (syncbn.Device over NCCL, three ranks, one
// of them with an empty batch; one rank on a machine with one GPU) gives every rank the statistics of the
// union of the batches: forward, the bits Syncer's host hook computes
// (Combine in rank order: the combine kernel does the same operations);
// backward, the sums over the ranks (in rank order on the fake: exact).
// The statistics are written on a non-blocking stream; on the fake, in
// one case that stream's work starts 60 ms late, in the other NCCL's:
// without the event NCCL waits for, the collectives would read the
// buffers before they hold the statistics; without the one the stream
// waits for, the combine kernel would read the gathered records before
// NCCL wrote them (each seen failing).
func TestDeviceMatchesHostHook(t *testing.T) {
	for _, late := range []string{"stream", "nccl"} {
		t.Run(late+" late", func(t *testing.T) { deviceMatchesHostHook(t, late) })
	}
}

func deviceMatchesHostHook(t *testing.T, late string) {
	const c, delay = 37, 60 * time.Millisecond
	cudafake.RequireCUDA(t)
	p := min(3, cuda.DeviceCount()) // a machine with one GPU: one rank
	cs := ncclRanks(t, p)
	fake := cudafake.Mode() == "fake"
	if fake && late == "nccl" {
		cudafake.NCCLDelay(t, delay)
	}
	recs := make([][]float64, p)
	grads := make([][]float64, p)
	for r := range recs {
		recs[r] = forwardRecord(r, c)
		grads[r] = make([]float64, 2*c)
		for i := range grads[r] {
			grads[r][i] = math.Sin(float64(i+1)*0.7+float64(r)) * math.Pow(10, float64(i%5))
		}
	}
	wantF := hostForward(recs, c)
	wantB := make([]float64, 2*c)
	for i := range wantB {
		for r := range grads {
			wantB[i] += grads[r][i]
		}
	}
	gotF, gotB := make([][]float64, p), make([][]float64, p)
	err := commtest.RunRanks(context.Background(), cs, 2*time.Minute, func(ctx context.Context, cm comm.Comm) error {
		r, dev := cm.Rank(), cm.Rank()
		d, err := syncbn.NewDevice(cm, dev)
		if err != nil {
			return err
		}
		s, err := cuda.NewStream(dev, true)
		if err != nil {
			return err
		}
		defer s.Destroy()
		// src holds the statistics; the stream copies them into buf, as
		// the batch norm's kernels write them there.
		nF, nB := 2*c+1, 2*c
		src, err := cuda.Malloc(dev, 8*(nF+nB))
		if err != nil {
			return err
		}
		defer cuda.Free(dev, src)
		buf, err := cuda.Malloc(dev, 8*(nF+nB))
		if err != nil {
			return err
		}
		defer cuda.Free(dev, buf)
		if err := cuda.CopyHtoD(dev, src, f64bytes(append(append([]float64{}, recs[r]...), grads[r]...))); err != nil {
			return err
		}
		if err := cuda.Memset(dev, buf, 0, 8*(nF+nB)); err != nil {
			return err
		}
		ev, err := cuda.NewEvent(dev)
		if err != nil {
			return err
		}
		defer ev.Destroy()
		if err := s.WaitDefault(ev); err != nil { // s reads src after the copy
			return err
		}
		if fake && late == "stream" {
			cudafake.StreamDelay(t, s, delay)
		}
		if err := s.CopyAsync(buf, src, 8*(nF+nB), cuda.DeviceToDevice); err != nil {
			return err
		}
		hook := d.Hook(ctx)
		if err := hook(s, "forward", buf, nF); err != nil {
			return err
		}
		if err := hook(s, "backward", buf+uintptr(8*nF), nB); err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		out := make([]float64, nF+nB)
		if err := cuda.CopyDtoH(dev, f64bytes(out), buf); err != nil {
			return err
		}
		gotF[r], gotB[r] = out[:nF], out[nF:]
		return d.Close(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	for r := range cs {
		for i, w := range wantF {
			if gotF[r][i] != w {
				t.Fatalf("rank %d: forward statistic %d = %v, the host hook's %v", r, i, gotF[r][i], w)
			}
		}
		for i, w := range wantB {
			if g := gotB[r][i]; g != w && (fake || math.Abs(g-w) > 1e-12*math.Abs(w)) {
				t.Fatalf("rank %d: backward sum %d = %v, want %v", r, i, g, w)
			}
		}
	}
	t.Logf("%d ranks, C = %d: forward bit for bit with the host hook (count %v, first channel's sum %v, M2 %v)", p, c, wantF[2*c], wantF[0], wantF[c])
}

// Bad use is refused with an error that names the problem and the rank;
// after Close the hook fails with comm.ErrClosed.
func TestDeviceRefuses(t *testing.T) {
	cs := ncclRanks(t, 1)
	ctx := context.Background()
	d, err := syncbn.NewDevice(cs[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	s := cudafake.NewStream(t, 0, true)
	buf := cudafake.Malloc(t, 0, 8*9)
	hook := d.Hook(ctx)
	for _, tc := range []struct {
		stage string
		n     int
		want  string
	}{
		{"forward", 8, "want 2C+1"},
		{"backward", 7, "want 2C+1 forward, 2C backward"},
		{"sideways", 8, `unknown stage "sideways"`},
	} {
		err := hook(s, tc.stage, buf, tc.n)
		if !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "rank 0") {
			t.Errorf("%s of %d: %v, want an invalid argument saying %q and naming rank 0", tc.stage, tc.n, err, tc.want)
		}
	}
	if err := d.Hook(nil)(s, "forward", buf, 9); !errors.Is(err, comm.ErrInvalidArgument) { //nolint:staticcheck // a nil ctx on purpose
		t.Errorf("nil ctx: %v", err)
	}
	if err := hook(s, "forward", buf, 9); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := hook(s, "forward", buf, 9); !errors.Is(err, comm.ErrClosed) {
		t.Errorf("after Close: %v, want comm.ErrClosed", err)
	}
}

// SyncBatchNorm statistics on the device: two ranks (goroutines, one GPU
// each) over NCCL, rank 0 with 2 samples of mean 1 in its one channel,
// rank 1 with 2 of mean 4: after the forward hook both hold the
// statistics of all 4 samples, without a copy to the host.
func ExampleDevice() {
	if cudafake.Mode() == "none" || cuda.DeviceCount() < 2 {
		fmt.Println("[10 10 4] [10 10 4]") // no CUDA here: what it prints with one
		return
	}
	cs, closeAll, err := newNCCL(2)
	if err != nil {
		panic(err)
	}
	defer closeAll()
	res := make([][]float64, 2)
	err = commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		r := c.Rank()
		d, err := syncbn.NewDevice(c, r) // rank r on GPU r
		if err != nil {
			return err
		}
		defer d.Close(ctx)
		mean := []float64{1, 4}[r]
		stats := []float64{2 * mean, 0.5, 2} // [sum x, M2, count] of this rank's batch
		buf, err := cuda.Malloc(r, 8*3)
		if err != nil {
			return err
		}
		defer cuda.Free(r, buf)
		if err := cuda.CopyHtoD(r, buf, f64bytes(stats)); err != nil {
			return err
		}
		s, err := cuda.NewStream(r, true) // the model's stream: non-blocking
		if err != nil {
			return err
		}
		defer s.Destroy()
		ev, err := cuda.NewEvent(r)
		if err != nil {
			return err
		}
		defer ev.Destroy()
		if err := s.WaitDefault(ev); err != nil { // s reads buf after the copy
			return err
		}
		if err := d.Hook(ctx)(s, "forward", buf, 3); err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		res[r] = make([]float64, 3)
		return cuda.CopyDtoH(r, f64bytes(res[r]), buf)
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(res[0], res[1])
	// Output: [10 10 4] [10 10 4]
}

// NewDevice refuses a Comm that does not take device buffers on its
// device: the nccl rank's on another GPU, and a host backend's staged
// through host memory (whose collectives record no event the model's
// stream could wait for: the combine would read the statistics before
// they arrive).
func TestDeviceRefusesComm(t *testing.T) {
	cs := ncclRanks(t, 1)
	if cuda.DeviceCount() < 2 {
		t.Skip("needs 2 GPUs")
	}
	if _, err := syncbn.NewDevice(cs[0], 1); !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "cuda:0") || !strings.Contains(err.Error(), "rank 0") {
		t.Errorf("the nccl rank of cuda:0 on cuda:1: %v, want an invalid argument naming cuda:0 and rank 0", err)
	}
	hs, err := inproc.New(1, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer hs[0].Close()
	_, err = syncbn.NewDevice(staging.Wrap(hs[0]), 0)
	if !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "host") || !strings.Contains(err.Error(), "HostSyncBN") {
		t.Errorf("a staged host backend: %v, want an invalid argument pointing to HostSyncBN", err)
	}
}
