package comm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
)

// checkSame runs CheckSame on 4 ranks as goroutines, rank r passing
// what(r) and fp(r), and returns every rank's error.
func checkSame(t *testing.T, what func(r int) string, fp func(r int) []byte) []error {
	t.Helper()
	cs, err := inproc.New(4, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]error, len(cs))
	err = commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		defer c.Close()
		got[c.Rank()] = comm.CheckSame(ctx, c, what(c.Rank()), fp(c.Rank()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestCheckSame: equal fingerprints pass on every rank; where some rank's
// differs, every rank fails with a *NotSameError (ErrMismatch) naming the
// ranks that differ from rank 0's and how: the bytes around the first
// difference, the lengths, or past the first 64 bytes the digests; calls
// of another what are named too.
func TestCheckSame(t *testing.T) {
	vocab := func(r int) []byte { return []byte("vocabulary: abcdefghijklmnopqrstuvwxyz") }
	same := func(string) func(int) string { return func(int) string { return "vocabulary" } }("")
	for r, err := range checkSame(t, same, vocab) {
		if err != nil {
			t.Fatalf("rank %d: %v with equal fingerprints", r, err)
		}
	}
	long := bytes.Repeat([]byte("0123456789"), 20)
	for _, c := range []struct {
		name   string
		what   func(int) string
		fp     func(int) []byte
		differ []int
		want   []string
	}{
		{"order", same, func(r int) []byte {
			if r == 1 || r == 3 { // map order
				return []byte("vocabulary: bacdefghijklmnopqrstuvwxyz")
			}
			return vocab(r)
		}, []int{1, 3}, []string{`ranks 1, 3 have "vocabulary: bacdefghijklmnopqrstuvwx"... where rank 0 has "vocabulary: abcdefghijklmnopqrstuvwx"...: first difference at byte 12`}},
		{"two ways", same, func(r int) []byte {
			switch r {
			case 2:
				return []byte("vocabulary: abc")
			case 3:
				return []byte("vocabulary: abcdefghijklmnopqrstuvwxyZ")
			}
			return vocab(r)
		}, []int{2, 3}, []string{"rank 2 has 15 bytes, rank 0 38 (the first 15 the same)", `rank 3 has ..."jklmnopqrstuvwxyZ" where rank 0 has ..."jklmnopqrstuvwxyz": first difference at byte 37`}},
		{"past the head", same, func(r int) []byte {
			b := append([]byte(nil), long...)
			if r == 2 {
				b[150] = 'x'
			}
			return b
		}, []int{2}, []string{"rank 2 has the same 200 bytes but for some after the first 64"}},
		{"another call", func(r int) string {
			if r == 1 {
				return "dataset"
			}
			return "vocabulary"
		}, vocab, []int{1}, []string{`rank 1 checked "dataset" at this point, rank 0 "vocabulary"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for r, err := range checkSame(t, c.what, c.fp) {
				var ns *comm.NotSameError
				if !errors.As(err, &ns) || !errors.Is(err, comm.ErrMismatch) {
					t.Fatalf("rank %d: %v, want a *comm.NotSameError", r, err)
				}
				if ns.Rank != r || fmt.Sprint(ns.Differ) != fmt.Sprint(c.differ) || !strings.HasPrefix(err.Error(), fmt.Sprintf("comm: rank %d: %s differs between ranks: ", r, c.what(r))) {
					t.Fatalf("rank %d: %v (rank %d, ranks %v differ), want ranks %v named", r, err, ns.Rank, ns.Differ, c.differ)
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("rank %d: %v\nwant it to say %s", r, err, w)
					}
				}
			}
		})
	}
}
