package wire

import (
	"errors"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	h := Header{Kind: KindColl, Op: OpAllReduce, DType: 1, Red: 1, Algo: 2, Group: 0xdeadbeef, Seq: 7,
		Count: 1 << 40, Root: -1, Step: 3, Offset: 100, Total: 1 << 30, Len: 4096}
	var b [HeaderSize]byte
	h.Encode(b[:])
	g, err := Decode(b[:])
	if err != nil {
		t.Fatal(err)
	}
	if g != h {
		t.Fatalf("got %+v want %+v", g, h)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := Header{Kind: KindP2P, Op: OpSend, DType: 1, Count: 10, Total: 40, Len: 40}
	cases := map[string]func(h *Header, b []byte){
		"oversized frame": func(h *Header, b []byte) { h.Len = MaxFrame + 1; h.Total = MaxFrame + 1 },
		"outside message": func(h *Header, b []byte) { h.Offset = 20 },
		"unknown kind":    func(h *Header, b []byte) { h.Kind = 99 },
		"unknown op":      func(h *Header, b []byte) { h.Op = 0 },
		"heartbeat body":  func(h *Header, b []byte) { h.Kind = KindHeartbeat },
		"huge abort": func(h *Header, b []byte) {
			h.Kind = KindAbort
			h.Len = MaxAbortText + 1
			h.Total = uint64(h.Len)
			h.Offset = 0
		},
	}
	for name, mod := range cases {
		h := good
		var b [HeaderSize]byte
		mod(&h, b[:])
		h.Encode(b[:])
		if _, err := Decode(b[:]); !errors.Is(err, ErrBadHeader) {
			t.Errorf("%s: got %v, want ErrBadHeader", name, err)
		}
	}
	var b [HeaderSize]byte
	good.Encode(b[:])
	b[0] ^= 1
	if _, err := Decode(b[:]); !errors.Is(err, ErrBadHeader) {
		t.Errorf("bad magic accepted")
	}
	if _, err := Decode(b[:10]); !errors.Is(err, ErrBadHeader) {
		t.Errorf("short header accepted")
	}
}

func TestMatch(t *testing.T) {
	a := Header{Kind: KindColl, Op: OpAllReduce, DType: 1, Red: 1, Seq: 5, Count: 1024, Total: 4096}
	if err := Match(a, a); err != nil {
		t.Fatal(err)
	}
	b := a
	b.Op = OpBroadcast
	err := Match(b, a)
	var me *MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("got %v", err)
	}
	if s := err.Error(); s == "" {
		t.Fatal("empty message")
	}
}

// FuzzDecode: whatever the bytes, Decode never panics, and a header it
// accepts satisfies the bounds the transports rely on and re-encodes to the
// same bytes.
func FuzzDecode(f *testing.F) {
	var b [HeaderSize]byte
	for _, h := range []Header{
		{Kind: KindColl, Op: OpAllReduce, DType: 1, Red: 1, Seq: 1, Count: 3, Total: 12, Len: 12},
		{Kind: KindP2P, Op: OpSend, DType: 2, Seq: 9, Count: 1 << 20, Total: 8 << 20, Offset: 4 << 20, Len: 4 << 20},
		{Kind: KindHeartbeat},
		{Kind: KindGoodbye},
		{Kind: KindAbort, Len: 5, Total: 5},
	} {
		h.Encode(b[:])
		f.Add(append([]byte(nil), b[:]...))
	}
	f.Add([]byte("GDST garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := Decode(data)
		if err != nil {
			return
		}
		if h.Len > MaxFrame {
			t.Fatalf("accepted frame of %d bytes", h.Len)
		}
		if (h.Kind == KindColl || h.Kind == KindP2P) && h.Offset+uint64(h.Len) > h.Total {
			t.Fatalf("accepted frame outside message: %+v", h)
		}
		var out [HeaderSize]byte
		h.Encode(out[:])
		if string(out[:]) != string(data[:HeaderSize]) {
			t.Fatalf("re-encode differs")
		}
	})
}
