package comm

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
)

// sameHead is how many of a fingerprint's first bytes CheckSame gathers
// to say where fingerprints differ.
const sameHead = 64

// sameRecord is what CheckSame gathers from each rank.
type sameRecord struct {
	What string
	Sum  [sha256.Size]byte
	Len  int
	Head []byte
}

// NotSameError is CheckSame's error: the fingerprint of What differs
// between ranks. Every rank gets one naming the same ranks. It wraps
// ErrMismatch.
type NotSameError struct {
	What string
	// Rank is the rank reporting it.
	Rank int
	// Differ lists the ranks whose fingerprint is not rank 0's, in order.
	Differ []int
	// Detail says how (lengths, and the bytes around the first
	// difference, where it lies in the first 64).
	Detail string
}

func (e *NotSameError) Error() string {
	return fmt.Sprintf("comm: rank %d: %s differs between ranks: %s", e.Rank, e.What, e.Detail)
}

func (e *NotSameError) Unwrap() error { return ErrMismatch }

// CheckSame checks that what must be identical on every rank is: each
// rank passes its fingerprint of it, bytes that differ where it differs
// (a vocabulary in order, a dataset's size and content hash, a model's
// shapes, a config), and what names it. Every rank gets nil when every
// fingerprint equals rank 0's, else the same *NotSameError (wrapping
// ErrMismatch), naming the ranks that differ from rank 0 and how:
//
//	comm: rank 0: vocabulary differs between ranks: ranks 1, 3 have
//	"vocabulary: bacdefghijklmnopqrstuvwx"... where rank 0 has
//	"vocabulary: abcdefghijklmnopqrstuvwx"...: first difference at byte 12
//
// Ranks that pass another what fail the same way (their calls do not
// match).
//
// The fingerprints may be large: each rank sends its SHA-256 digest, its
// length and its first 64 bytes (for the message), one all-gather.
// Blocking; every rank calls it, with ctx bounding the wait.
func CheckSame(ctx context.Context, c Comm, what string, fingerprint []byte) error {
	if c == nil {
		return InvalidArgf("CheckSame: nil comm")
	}
	mine := sameRecord{What: what, Sum: sha256.Sum256(fingerprint), Len: len(fingerprint),
		Head: fingerprint[:min(len(fingerprint), sameHead)]}
	all, err := AllGatherObject(ctx, c, mine)
	if err != nil {
		return fmt.Errorf("comm: rank %d: checking that %s is the same on every rank: %w", c.Rank(), what, err)
	}
	ref := all[0]
	var differ []int
	var groups [][]int // ranks with the same record, each unlike rank 0's
	for r, rec := range all[1:] {
		r++
		if rec.What == ref.What && rec.Sum == ref.Sum && rec.Len == ref.Len {
			continue
		}
		differ = append(differ, r)
		found := false
		for i, g := range groups {
			if o := all[g[0]]; o.What == rec.What && o.Sum == rec.Sum && o.Len == rec.Len {
				groups[i], found = append(g, r), true
				break
			}
		}
		if !found {
			groups = append(groups, []int{r})
		}
	}
	if differ == nil {
		return nil
	}
	var parts []string
	for _, g := range groups {
		parts = append(parts, describeDiff(g, all[g[0]], ref))
	}
	return &NotSameError{What: what, Rank: c.Rank(), Differ: differ, Detail: strings.Join(parts, "; ")}
}

// describeDiff says how the fingerprint of ranks differs from rank 0's.
func describeDiff(ranks []int, rec, ref sameRecord) string {
	who := "rank " + strconv.Itoa(ranks[0])
	if len(ranks) > 1 {
		s := make([]string, len(ranks))
		for i, r := range ranks {
			s[i] = strconv.Itoa(r)
		}
		who = "ranks " + strings.Join(s, ", ")
	}
	if rec.What != ref.What {
		return fmt.Sprintf("%s checked %q at this point, rank 0 %q (the ranks' calls do not match)", who, rec.What, ref.What)
	}
	n := 0
	for n < len(rec.Head) && n < len(ref.Head) && rec.Head[n] == ref.Head[n] {
		n++
	}
	has := " has"
	if len(ranks) > 1 {
		has = " have"
	}
	if n == min(len(rec.Head), len(ref.Head)) { // no difference in the first bytes
		if rec.Len != ref.Len {
			return fmt.Sprintf("%s%s %d bytes, rank 0 %d (the first %d the same)", who, has, rec.Len, ref.Len, n)
		}
		return fmt.Sprintf("%s%s the same %d bytes but for some after the first %d (SHA-256 %x..., rank 0 %x...)", who, has, rec.Len, n, rec.Sum[:6], ref.Sum[:6])
	}
	window := func(b []byte) string {
		lo, hi := max(n-16, 0), min(n+24, len(b))
		s := strconv.Quote(string(b[lo:hi]))
		if lo > 0 {
			s = "..." + s
		}
		if hi < len(b) {
			s += "..."
		}
		return s
	}
	size := ""
	if rec.Len != ref.Len {
		size = fmt.Sprintf(" (%d bytes, rank 0 %d)", rec.Len, ref.Len)
	}
	return fmt.Sprintf("%s%s %s where rank 0 has %s: first difference at byte %d%s", who, has, window(rec.Head), window(ref.Head), n, size)
}
