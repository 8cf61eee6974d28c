package rendezvous

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/gdist/gdist/comm"
)

func sampleRequests() []request {
	return []request{
		{op: opSet, id: 1, key: "k", value: []byte("value")},
		{op: opSet, id: 2, key: "", value: []byte{}},
		{op: opGet, id: 3, key: "some/key"},
		{op: opAdd, id: 4, key: "ctr", delta: -7},
		{op: opCAS, id: 5, key: "c", old: []byte{}, value: []byte("new")},
		{op: opWait, id: 6, keys: []string{"a", "b", "c"}},
		{op: opCancel, id: 7},
	}
}

func TestRequestRoundTrip(t *testing.T) {
	for _, r := range sampleRequests() {
		frame := encodeRequest(r)
		if n := binary.LittleEndian.Uint32(frame); int(n) != len(frame)-4 {
			t.Fatalf("%s: length prefix %d, body %d", opName(r.op), n, len(frame)-4)
		}
		got, err := decodeRequest(frame[4:])
		if err != nil {
			t.Fatalf("%s: %v", opName(r.op), err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("%s: got %+v, want %+v", opName(r.op), got, r)
		}
	}
}

func TestReplyRoundTrip(t *testing.T) {
	r := reply{id: 99, status: statusInvalid, payload: []byte("why")}
	frame := encodeReply(r)
	body, err := readFrame(bytes.NewReader(frame), maxReplyFrame)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeReply(body)
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := encodeRequest(request{op: opSet, id: 1, key: "k", value: []byte("v")})[4:]
	cases := map[string][]byte{
		"empty":     {},
		"unknown":   append([]byte{99}, make([]byte, 8)...),
		"truncated": good[:len(good)-1],
		"trailing":  append(append([]byte(nil), good...), 0),
		"long key": func() []byte {
			b := append([]byte{opGet}, make([]byte, 8)...)
			return binary.LittleEndian.AppendUint16(b, MaxKeyLen+1)
		}(),
		"no wait keys": append(append([]byte{opWait}, make([]byte, 8)...), 0, 0),
	}
	for name, body := range cases {
		if _, err := decodeRequest(body); !errors.Is(err, comm.ErrProtocol) {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

func TestReadFrameBounds(t *testing.T) {
	frame := binary.LittleEndian.AppendUint32(nil, 100)
	if _, err := readFrame(bytes.NewReader(frame), 99); !errors.Is(err, comm.ErrProtocol) {
		t.Fatalf("oversized: %v", err)
	}
	// Announces 1 MiB, sends 10 bytes: an error, not a hang or a panic.
	frame = binary.LittleEndian.AppendUint32(nil, 1<<20)
	frame = append(frame, make([]byte, 10)...)
	if _, err := readFrame(bytes.NewReader(frame), 2<<20); !errors.Is(err, comm.ErrProtocol) {
		t.Fatalf("short: %v", err)
	}
	// A frame larger than one read chunk arrives whole.
	payload := bytes.Repeat([]byte("abcdefg"), 30000)
	frame = append(binary.LittleEndian.AppendUint32(nil, uint32(len(payload))), payload...)
	got, err := readFrame(bytes.NewReader(frame), len(payload))
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("large frame: %d bytes, %v", len(got), err)
	}
}

// FuzzDecodeRequest checks that the request decoder never panics and that
// whatever it accepts re-encodes to the same bytes.
func FuzzDecodeRequest(f *testing.F) {
	for _, r := range sampleRequests() {
		f.Add(encodeRequest(r)[4:])
	}
	f.Add([]byte{})
	f.Add([]byte{opWait, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff})
	f.Add([]byte{opCAS, 1, 2, 3, 4, 5, 6, 7, 8, 1, 0, 'k', 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decodeRequest(body)
		if err != nil {
			if !errors.Is(err, comm.ErrProtocol) {
				t.Fatalf("error does not wrap ErrProtocol: %v", err)
			}
			return
		}
		if again := encodeRequest(r)[4:]; !bytes.Equal(again, body) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, body)
		}
	})
}
