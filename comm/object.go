package comm

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
)

// MaxObjectBytes bounds the encoded size of one object sent by the object
// helpers.
const MaxObjectBytes = 64 << 20

// BroadcastObject sends root's *v to every rank, which decodes it into *v
// (encoding/gob). It blocks, and every rank must call it.
func BroadcastObject[T any](ctx context.Context, c Comm, v *T, root int) error {
	var enc []byte
	if c.Rank() == root {
		var b bytes.Buffer
		if err := gob.NewEncoder(&b).Encode(v); err != nil {
			return InvalidArgf("BroadcastObject: encode: %v", err)
		}
		enc = b.Bytes()
		if len(enc) > MaxObjectBytes {
			return InvalidArgf("BroadcastObject: object is %d bytes, over the %d limit", len(enc), MaxObjectBytes)
		}
	}
	n := []int64{int64(len(enc))}
	if err := Run(ctx)(c.Broadcast(ctx, FromSlice(n), root)); err != nil {
		return err
	}
	if n[0] < 0 || n[0] > MaxObjectBytes {
		return fmt.Errorf("%w: BroadcastObject: announced size %d", ErrProtocol, n[0])
	}
	if c.Rank() != root {
		enc = make([]byte, n[0])
	}
	if err := Run(ctx)(c.Broadcast(ctx, FromSlice(enc), root)); err != nil {
		return err
	}
	if c.Rank() == root {
		return nil
	}
	if err := gob.NewDecoder(bytes.NewReader(enc)).Decode(v); err != nil {
		return fmt.Errorf("%w: BroadcastObject: decode: %v", ErrProtocol, err)
	}
	return nil
}

// AllGatherObject returns every rank's v, in rank order (encoding/gob). It
// blocks, and every rank must call it.
func AllGatherObject[T any](ctx context.Context, c Comm, v T) ([]T, error) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(&v); err != nil {
		return nil, InvalidArgf("AllGatherObject: encode: %v", err)
	}
	if b.Len() > MaxObjectBytes {
		return nil, InvalidArgf("AllGatherObject: object is %d bytes, over the %d limit", b.Len(), MaxObjectBytes)
	}
	p := c.Size()
	sizes := make([]int64, p)
	if err := Run(ctx)(c.AllGather(ctx, FromSlice(sizes), FromSlice([]int64{int64(b.Len())}))); err != nil {
		return nil, err
	}
	var max int64
	for i, s := range sizes {
		if s < 0 || s > MaxObjectBytes {
			return nil, fmt.Errorf("%w: AllGatherObject: rank %d announced size %d", ErrProtocol, i, s)
		}
		if s > max {
			max = s
		}
	}
	if max == 0 { // gob never encodes to zero bytes, but stay safe
		max = 1
	}
	src := make([]byte, max)
	copy(src, b.Bytes())
	all := make([]byte, int(max)*p)
	if err := Run(ctx)(c.AllGather(ctx, FromSlice(all), FromSlice(src))); err != nil {
		return nil, err
	}
	out := make([]T, p)
	for i := range out {
		part := all[int64(i)*max : int64(i)*max+sizes[i]]
		if err := gob.NewDecoder(bytes.NewReader(part)).Decode(&out[i]); err != nil {
			return nil, fmt.Errorf("%w: AllGatherObject: decode rank %d: %v", ErrProtocol, i, err)
		}
	}
	return out, nil
}

// RankError is the failure of one rank that Agree reports to all.
type RankError struct {
	Rank int
	Msg  string
}

func (e *RankError) Error() string { return fmt.Sprintf("rank %d: %s", e.Rank, e.Msg) }

// Agree lets every rank learn whether any rank failed: each passes its own
// error (nil when it succeeded); every rank gets nil if all passed nil,
// else a *RankError naming the lowest failed rank and its message (so no
// rank goes on alone after a step that failed elsewhere). A failure of the
// exchange itself is returned as it is. It blocks, and every rank must
// call it.
func Agree(ctx context.Context, c Comm, err error) error {
	msg := ""
	if err != nil {
		msg = err.Error()
		if msg == "" {
			msg = "failed"
		}
	}
	all, gerr := AllGatherObject(ctx, c, msg)
	if gerr != nil {
		return gerr
	}
	for r, m := range all {
		if m != "" {
			return &RankError{Rank: r, Msg: m}
		}
	}
	return nil
}
