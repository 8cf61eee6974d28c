package commtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
)

// StoreSuite runs the semantics every comm.Store must have against the
// store open returns: two handles (a and b) on one store, as two ranks see
// it (for an in-memory store, the same one twice; for a server, two
// clients).
func StoreSuite(t *testing.T, open func(t *testing.T) (a, b comm.Store)) {
	t.Run("SetGetAddCASWait", func(t *testing.T) { storeBasics(t, open) })
	t.Run("Concurrent", func(t *testing.T) { storeConcurrent(t, open) })
	t.Run("Cancel", func(t *testing.T) { storeCancel(t, open) })
}

func storeCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// storeBasics: a value set by one handle is read by the other; Add counts
// from 0 in decimal text; CompareAndSet matches an absent key with an
// empty old and returns the current value on a mismatch; Wait blocks until
// every key exists.
func storeBasics(t *testing.T, open func(t *testing.T) (a, b comm.Store)) {
	ctx := storeCtx(t)
	a, b := open(t)
	if err := a.Set(ctx, "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Get(ctx, "k"); err != nil || string(v) != "v1" {
		t.Fatalf("get = %q, %v", v, err)
	}
	buf := []byte("mine")
	if err := a.Set(ctx, "owned", buf); err != nil {
		t.Fatal(err)
	}
	buf[0] = 'X' // the store keeps its own copy
	if v, err := b.Get(ctx, "owned"); err != nil || string(v) != "mine" {
		t.Fatalf("the store kept the caller's slice: %q, %v", v, err)
	}
	if err := a.Set(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Get(ctx, "empty"); err != nil || len(v) != 0 {
		t.Fatalf("get empty = %q, %v", v, err)
	}

	if n, err := a.Add(ctx, "ctr", 5); err != nil || n != 5 {
		t.Fatalf("add = %d, %v", n, err)
	}
	if n, err := b.Add(ctx, "ctr", -2); err != nil || n != 3 {
		t.Fatalf("add = %d, %v", n, err)
	}
	if v, _ := a.Get(ctx, "ctr"); string(v) != "3" {
		t.Fatalf("counter reads %q", v)
	}
	if _, err := a.Add(ctx, "k", 1); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("add to non-integer: %v", err)
	}

	if v, err := a.CompareAndSet(ctx, "cas", nil, []byte("x")); err != nil || string(v) != "x" {
		t.Fatalf("cas absent = %q, %v", v, err)
	}
	if v, err := b.CompareAndSet(ctx, "cas", []byte("wrong"), []byte("y")); err != nil || string(v) != "x" {
		t.Fatalf("cas mismatch = %q, %v", v, err)
	}
	if v, err := b.CompareAndSet(ctx, "cas", []byte("x"), []byte("y")); err != nil || string(v) != "y" {
		t.Fatalf("cas match = %q, %v", v, err)
	}
	if v, err := b.CompareAndSet(ctx, "cas-absent", []byte("x"), []byte("y")); err != nil || len(v) != 0 {
		t.Fatalf("cas absent with old = %q, %v", v, err)
	}

	if err := a.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Wait(ctx, "k", "w1", "w2") }()
	b.Set(ctx, "w1", []byte("1"))
	select {
	case err := <-done:
		t.Fatalf("wait returned before every key existed: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	b.Set(ctx, "w2", []byte("2"))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// storeConcurrent: many goroutines on both handles; exactly one
// CompareAndSet from absent wins, no Add is lost, and a Get of a key set
// later by another goroutine returns it.
func storeConcurrent(t *testing.T, open func(t *testing.T) (a, b comm.Store)) {
	ctx := storeCtx(t)
	a, b := open(t)
	const per = 40
	var wg sync.WaitGroup
	wins := make(chan int, 2*per)
	for i, st := range []comm.Store{a, b} {
		for j := range per {
			wg.Go(func() {
				if _, err := st.Add(ctx, "n", 1); err != nil {
					t.Error(err)
				}
				me := fmt.Sprint(i, "/", j)
				if v, err := st.CompareAndSet(ctx, "winner", nil, []byte(me)); err != nil {
					t.Error(err)
				} else if string(v) == me {
					wins <- 1
				}
				if _, err := st.Get(ctx, fmt.Sprint("key", 1-i, "/", j)); err != nil {
					t.Error(err)
				}
			})
			wg.Go(func() {
				if err := st.Set(ctx, fmt.Sprint("key", i, "/", j), []byte{byte(j)}); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	close(wins)
	if n := len(wins); n != 1 {
		t.Errorf("%d CompareAndSet winners, want 1", n)
	}
	if n, err := a.Add(ctx, "n", 0); err != nil || n != 2*per {
		t.Errorf("counter = %d, %v; want %d", n, err, 2*per)
	}
}

// storeCancel: a Get or Wait of a key nobody sets ends with its ctx, and
// the store still works afterwards.
func storeCancel(t *testing.T, open func(t *testing.T) (a, b comm.Store)) {
	ctx := storeCtx(t)
	a, _ := open(t)
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := a.Get(cctx, "never")
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Get: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled Get did not return")
	}
	tctx, tcancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer tcancel()
	if err := a.Wait(tctx, "never"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its deadline: %v", err)
	}
	if err := a.Set(ctx, "x", nil); err != nil {
		t.Fatalf("store unusable after a cancelled call: %v", err)
	}
}
