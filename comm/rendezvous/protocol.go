package rendezvous

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/gdist/gdist/comm"
)

// Bounds on what a peer may send. Every length read from the network is
// checked against these before anything is allocated for it.
const (
	// MaxKeyLen bounds a key, in bytes.
	MaxKeyLen = 4 << 10
	// MaxValueLen bounds a value, in bytes.
	MaxValueLen = 64 << 20
	// MaxWaitKeys bounds the keys of one Wait request on the wire; the
	// client splits longer lists.
	MaxWaitKeys = 1024
	// MaxPending bounds the blocking requests (Get, Wait) one connection
	// may have in flight on the server.
	MaxPending = 1024
)

// Request op codes.
const (
	opSet    uint8 = 1
	opGet    uint8 = 2
	opAdd    uint8 = 3
	opCAS    uint8 = 4
	opWait   uint8 = 5
	opCancel uint8 = 6 // cancels the blocking request with the same id; no reply
)

var opNames = [...]string{"?", "set", "get", "add", "compare_and_set", "wait", "cancel"}

func opName(op uint8) string {
	if int(op) < len(opNames) && op != 0 {
		return opNames[op]
	}
	return fmt.Sprintf("op(%d)", op)
}

// Reply status codes.
const (
	statusOK      uint8 = 0
	statusInvalid uint8 = 1 // maps to comm.ErrInvalidArgument
	statusClosed  uint8 = 2 // maps to comm.ErrClosed
	statusBusy    uint8 = 3 // too many pending requests; maps to comm.ErrProtocol
)

// Frame size bounds: a request frame is at most a CAS with the largest key
// and two largest values; a wait frame is smaller. A reply carries at most
// one value.
const (
	maxRequestFrame = 1 + 8 + 2 + MaxKeyLen + 2*(4+MaxValueLen)
	maxReplyFrame   = 8 + 1 + 4 + MaxValueLen
)

// request is one decoded request. Every frame on the wire is a little-endian
// uint32 body length followed by the body. A request body is
//
//	op u8 | id u64 | fields
//
// where the fields are, by op (key = u16 length + bytes, value = u32 length +
// bytes):
//
//	set:     key value
//	get:     key
//	add:     key delta(i64)
//	cas:     key old(value) new(value)
//	wait:    count(u16, 1..MaxWaitKeys) key*count
//	cancel:  (none)
//
// A reply body is id u64 | status u8 | payload(value). The payload is the
// value for get and cas, 8 bytes (i64) for add, empty for set and wait, and
// the error text for a status other than OK.
type request struct {
	op    uint8
	id    uint64
	key   string
	keys  []string // wait
	old   []byte   // cas
	value []byte   // set, cas
	delta int64    // add
}

type reply struct {
	id      uint64
	status  uint8
	payload []byte
}

func appendKey(b []byte, k string) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(k)))
	return append(b, k...)
}

func appendValue(b, v []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

// encodeRequest returns the whole frame (length prefix included). The caller
// has checked the bounds.
func encodeRequest(r request) []byte {
	n := 4 + 1 + 8 + 2 + len(r.key) + 8 + 4 + len(r.old) + 4 + len(r.value)
	for _, k := range r.keys {
		n += 2 + len(k)
	}
	b := make([]byte, 4, n+2)
	b = append(b, r.op)
	b = binary.LittleEndian.AppendUint64(b, r.id)
	switch r.op {
	case opSet:
		b = appendKey(b, r.key)
		b = appendValue(b, r.value)
	case opGet:
		b = appendKey(b, r.key)
	case opAdd:
		b = appendKey(b, r.key)
		b = binary.LittleEndian.AppendUint64(b, uint64(r.delta))
	case opCAS:
		b = appendKey(b, r.key)
		b = appendValue(b, r.old)
		b = appendValue(b, r.value)
	case opWait:
		b = binary.LittleEndian.AppendUint16(b, uint16(len(r.keys)))
		for _, k := range r.keys {
			b = appendKey(b, k)
		}
	}
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// decoder reads fields from a request body, recording the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{comm.ErrProtocol}, args...)...)
	}
}

func (d *decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.fail("truncated %s: need %d bytes, have %d", what, n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8(what string) uint8 {
	if v := d.take(1, what); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u16(what string) int {
	if v := d.take(2, what); v != nil {
		return int(binary.LittleEndian.Uint16(v))
	}
	return 0
}

func (d *decoder) u32(what string) int {
	if v := d.take(4, what); v != nil {
		return int(binary.LittleEndian.Uint32(v))
	}
	return 0
}

func (d *decoder) u64(what string) uint64 {
	if v := d.take(8, what); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (d *decoder) key() string {
	n := d.u16("key length")
	if n > MaxKeyLen {
		d.fail("key of %d bytes exceeds %d", n, MaxKeyLen)
		return ""
	}
	return string(d.take(n, "key"))
}

func (d *decoder) value(what string) []byte {
	n := d.u32(what + " length")
	if n > MaxValueLen {
		d.fail("%s of %d bytes exceeds %d", what, n, MaxValueLen)
		return nil
	}
	v := d.take(n, what)
	if v == nil && d.err == nil {
		v = []byte{}
	}
	return v
}

// decodeRequest decodes a request body (without its length prefix). The
// returned byte slices alias body. Any malformation gives an error wrapping
// comm.ErrProtocol.
func decodeRequest(body []byte) (request, error) {
	d := &decoder{b: body}
	var r request
	r.op = d.u8("op")
	r.id = d.u64("request id")
	switch r.op {
	case opSet:
		r.key = d.key()
		r.value = d.value("value")
	case opGet:
		r.key = d.key()
	case opAdd:
		r.key = d.key()
		r.delta = int64(d.u64("delta"))
	case opCAS:
		r.key = d.key()
		r.old = d.value("old value")
		r.value = d.value("new value")
	case opWait:
		n := d.u16("key count")
		if d.err == nil && (n < 1 || n > MaxWaitKeys) {
			d.fail("wait for %d keys, want 1..%d", n, MaxWaitKeys)
		}
		for i := 0; i < n && d.err == nil; i++ {
			r.keys = append(r.keys, d.key())
		}
	case opCancel:
	default:
		if d.err == nil {
			d.fail("unknown op %d", r.op)
		}
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d trailing bytes after %s request", len(d.b), opName(r.op))
	}
	if d.err != nil {
		return request{}, d.err
	}
	return r, nil
}

func encodeReply(r reply) []byte {
	b := make([]byte, 4, 4+8+1+4+len(r.payload))
	b = binary.LittleEndian.AppendUint64(b, r.id)
	b = append(b, r.status)
	b = appendValue(b, r.payload)
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func decodeReply(body []byte) (reply, error) {
	d := &decoder{b: body}
	var r reply
	r.id = d.u64("request id")
	r.status = d.u8("status")
	r.payload = d.value("payload")
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d trailing bytes after reply", len(d.b))
	}
	if d.err != nil {
		return reply{}, d.err
	}
	return r, nil
}

// readFrame reads one length-prefixed frame of at most limit body bytes. The
// body buffer grows with the bytes actually received, so a peer announcing
// a large frame and sending nothing does not make us allocate it all.
func readFrame(r io.Reader, limit int) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(head[:]))
	if n > limit {
		return nil, fmt.Errorf("%w: frame of %d bytes exceeds %d", comm.ErrProtocol, n, limit)
	}
	const chunk = 64 << 10
	buf := make([]byte, 0, min(n, chunk))
	for len(buf) < n {
		step := min(n-len(buf), max(chunk, len(buf)))
		if cap(buf)-len(buf) < step {
			nb := make([]byte, len(buf), len(buf)+step)
			copy(nb, buf)
			buf = nb
		}
		got, err := io.ReadFull(r, buf[len(buf):len(buf)+step])
		buf = buf[:len(buf)+got]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("%w: reading a frame of %d bytes: %v", comm.ErrProtocol, n, err)
		}
	}
	return buf, nil
}
