//go:build linux

package shm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/rendezvous"
)

// BenchmarkPingPong: rank 0 sends n bytes to rank 1, which sends them
// back; one op is one round trip (both ranks in this process).
func BenchmarkPingPong(b *testing.B) {
	for _, n := range []int{8, 4 << 10, 64 << 10, 256 << 10, 4 << 20} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			w := &world{store: rendezvous.NewMemStore(), job: b.Name(), dir: b.TempDir(), ts: make([]*Transport, 2), logs: []*logBuf{{}, {}}}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for r, err := range w.build(ctx, 2, comm.Options{}, Options{}, 0, 1) {
				if err != nil {
					b.Fatal(r, err)
				}
			}
			defer w.ts[0].Close()
			defer w.ts[1].Close()
			buf0, buf1 := make([]byte, n), make([]byte, n)
			h := coll(1, 1)
			done := make(chan error, 1)
			go func() {
				for i := 0; i < b.N; i++ {
					if err := w.ts[1].Recv(ctx, 0, h, buf1); err != nil {
						done <- err
						return
					}
					if err := w.ts[1].Send(ctx, 0, h, buf1); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			b.SetBytes(int64(2 * n))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := w.ts[0].Send(ctx, 1, h, buf0); err != nil {
					b.Fatal(err)
				}
				if err := w.ts[0].Recv(ctx, 1, h, buf0); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkPingPongProcess is BenchmarkPingPong with rank 1 in another
// process (a child running the echo loop), as in a real job.
func BenchmarkPingPongProcess(b *testing.B) {
	for _, n := range []int{8, 4 << 10, 64 << 10, 256 << 10, 4 << 20} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			srv, err := rendezvous.NewServer("127.0.0.1:0", token, b.Logf)
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"=echo", "GDIST_STORE_ADDR="+srv.Addr(),
				fmt.Sprintf("ECHO_BYTES=%d", n), fmt.Sprintf("ECHO_COUNT=%d", b.N))
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			defer cmd.Wait()
			st, err := rendezvous.Dial(ctx, srv.Addr(), token)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			tr, err := New(ctx, comm.Config{Rank: 0, Size: 2, Store: st, Token: token, Job: "pingpong"})
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			buf := make([]byte, n)
			h := coll(1, 1)
			b.SetBytes(int64(2 * n))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := tr.Send(ctx, 1, h, buf); err != nil {
					b.Fatal(err)
				}
				if err := tr.Recv(ctx, 1, h, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// echo is the child side of BenchmarkPingPongProcess.
func echo() int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n, _ := strconv.Atoi(os.Getenv("ECHO_BYTES"))
	count, _ := strconv.Atoi(os.Getenv("ECHO_COUNT"))
	st, err := rendezvous.Dial(ctx, os.Getenv("GDIST_STORE_ADDR"), token)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer st.Close()
	tr, err := New(ctx, comm.Config{Rank: 1, Size: 2, Store: st, Token: token, Job: "pingpong"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	buf := make([]byte, n)
	h := coll(1, 1)
	for i := 0; i < count; i++ {
		if err := tr.Recv(ctx, 0, h, buf); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := tr.Send(ctx, 0, h, buf); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	tr.Close()
	return 0
}
