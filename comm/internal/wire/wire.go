// Package wire defines the fixed-size header that precedes every frame the
// process transports exchange, its encoding, and the checks a receiver makes
// before it writes a single payload byte: bounded sizes, known kinds, and a
// match against the operation it expects.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// HeaderSize is the encoded size of a Header.
const HeaderSize = 64

// Magic starts every header ("GDST").
const Magic uint32 = 0x54534447

// Version is the protocol version.
const Version = 1

// MaxFrame bounds the payload of one frame. Longer messages are split into
// frames by the transport.
const MaxFrame = 4 << 20

// MaxAbortText bounds the payload of an abort frame.
const MaxAbortText = 4 << 10

// Kind says what a frame carries.
type Kind uint8

// Frame kinds.
const (
	KindColl      Kind = 1 // part of a collective
	KindP2P       Kind = 2 // part of a Send; Seq holds the tag
	KindHeartbeat Kind = 3 // no payload; proves liveness
	KindGoodbye   Kind = 4 // the sender closes; the payload (at most MaxAbortText) is the failure that made it close, if any
	KindAbort     Kind = 5 // the sender aborts Group; payload is the reason
)

// Op codes of the operations, carried so that mismatches can be named.
const (
	OpAllReduce uint8 = iota + 1
	OpBroadcast
	OpReduce
	OpAllGather
	OpGather
	OpScatter
	OpReduceScatter
	OpAllToAll
	OpSend
	OpBarrier
	OpSplit
	opEnd
)

var opNames = [...]string{"?", "all_reduce", "broadcast", "reduce", "all_gather", "gather", "scatter", "reduce_scatter", "all_to_all", "send", "barrier", "split"}

// OpName names an op code.
func OpName(op uint8) string {
	if op == 0 || op >= opEnd {
		return fmt.Sprintf("op(%d)", op)
	}
	return opNames[op]
}

// Header precedes every frame.
type Header struct {
	Kind   Kind
	Op     uint8
	DType  uint8
	Red    uint8 // reduce op (0 if none)
	Algo   uint8 // algorithm id, so ranks that chose differently find out
	Group  uint64
	Seq    uint64 // collective sequence number in Group; the tag for KindP2P
	Count  uint64 // element count of the whole operation as the sender issued it
	Root   int32
	Step   uint32 // algorithm step of this message
	Offset uint64 // byte offset of this frame in its message
	Total  uint64 // byte length of the whole message
	Len    uint32 // payload bytes in this frame
}

// ErrBadHeader is wrapped by every decoding error.
var ErrBadHeader = errors.New("wire: bad header")

// Encode writes h into b (len(b) >= HeaderSize).
func (h *Header) Encode(b []byte) {
	_ = b[HeaderSize-1]
	le := binary.LittleEndian
	le.PutUint32(b[0:], Magic)
	b[4] = Version
	b[5] = byte(h.Kind)
	b[6] = h.Op
	b[7] = h.DType
	b[8] = h.Red
	b[9] = h.Algo
	b[10], b[11] = 0, 0
	le.PutUint64(b[12:], h.Group)
	le.PutUint64(b[20:], h.Seq)
	le.PutUint64(b[28:], h.Count)
	le.PutUint32(b[36:], uint32(h.Root))
	le.PutUint32(b[40:], h.Step)
	le.PutUint64(b[44:], h.Offset)
	le.PutUint64(b[52:], h.Total)
	le.PutUint32(b[60:], h.Len)
}

// Decode parses and validates a header. It rejects anything a well-behaved
// peer never sends: a wrong magic or version, an unknown kind, a payload over
// MaxFrame, a frame outside its message, or a payload on a kind that has none.
func Decode(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderSize {
		return h, fmt.Errorf("%w: %d bytes, need %d", ErrBadHeader, len(b), HeaderSize)
	}
	le := binary.LittleEndian
	if m := le.Uint32(b[0:]); m != Magic {
		return h, fmt.Errorf("%w: magic %#x", ErrBadHeader, m)
	}
	if b[4] != Version {
		return h, fmt.Errorf("%w: version %d, want %d", ErrBadHeader, b[4], Version)
	}
	if b[10] != 0 || b[11] != 0 {
		return h, fmt.Errorf("%w: reserved bits set", ErrBadHeader)
	}
	h = Header{
		Kind: Kind(b[5]), Op: b[6], DType: b[7], Red: b[8], Algo: b[9],
		Group: le.Uint64(b[12:]), Seq: le.Uint64(b[20:]), Count: le.Uint64(b[28:]),
		Root: int32(le.Uint32(b[36:])), Step: le.Uint32(b[40:]),
		Offset: le.Uint64(b[44:]), Total: le.Uint64(b[52:]), Len: le.Uint32(b[60:]),
	}
	switch h.Kind {
	case KindColl, KindP2P:
		if h.Len > MaxFrame {
			return h, fmt.Errorf("%w: frame of %d bytes exceeds the %d limit", ErrBadHeader, h.Len, MaxFrame)
		}
		if h.Offset > h.Total || uint64(h.Len) > h.Total-h.Offset {
			return h, fmt.Errorf("%w: frame [%d, +%d) outside its %d-byte message", ErrBadHeader, h.Offset, h.Len, h.Total)
		}
		if h.Op == 0 || h.Op >= opEnd {
			return h, fmt.Errorf("%w: unknown op %d", ErrBadHeader, h.Op)
		}
	case KindHeartbeat:
		if h.Len != 0 || h.Total != 0 || h.Offset != 0 {
			return h, fmt.Errorf("%w: %v frame with a payload", ErrBadHeader, h.Kind)
		}
	case KindAbort, KindGoodbye:
		if h.Len > MaxAbortText || h.Offset != 0 || h.Total != uint64(h.Len) {
			return h, fmt.Errorf("%w: %v frame of %d bytes", ErrBadHeader, h.Kind, h.Len)
		}
	default:
		return h, fmt.Errorf("%w: unknown kind %d", ErrBadHeader, h.Kind)
	}
	return h, nil
}

func (k Kind) String() string {
	switch k {
	case KindColl:
		return "collective"
	case KindP2P:
		return "p2p"
	case KindHeartbeat:
		return "heartbeat"
	case KindGoodbye:
		return "goodbye"
	case KindAbort:
		return "abort"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MismatchError says that a received message does not belong to the
// operation the receiver is running.
type MismatchError struct {
	Got, Want Header
}

// Error names both sides from the receiver's view (the transports match a
// frame when it is received): for point-to-point, the peer's send and this
// rank's recv.
func (e *MismatchError) Error() string {
	return fmt.Sprintf("peer is in %s but this rank is in %s", DescribeP2P(e.Got, false), DescribeP2P(e.Want, true))
}

// DescribeP2P is Describe, naming a point-to-point header as the receive
// (recv true) or the send it matches: "recv(tag 3, float32 x 10)".
// Collective headers are named as by Describe.
func DescribeP2P(h Header, recv bool) string {
	if h.Kind != KindP2P {
		return Describe(h)
	}
	call := "send"
	if recv {
		call = "recv"
	}
	return fmt.Sprintf("%s(tag %d, %s x %d)", call, int64(h.Seq), dtypeName(h.DType), h.Count)
}

// Describe names the operation a header belongs to, for error messages. A
// point-to-point header is named as the send that carries it (DescribeP2P
// names the receiving side).
func Describe(h Header) string {
	if h.Kind == KindP2P {
		return DescribeP2P(h, false)
	}
	s := fmt.Sprintf("%s #%d (%s x %d", OpName(h.Op), h.Seq, dtypeName(h.DType), h.Count)
	if h.Red != 0 {
		s += ", " + redName(h.Red)
	}
	switch h.Op {
	case OpBroadcast, OpReduce, OpGather, OpScatter:
		s += fmt.Sprintf(", root %d", h.Root)
	}
	return s + fmt.Sprintf(", algo %d, step %d, %d bytes)", h.Algo, h.Step, h.Total)
}

// The names below mirror package comm's; wire cannot import comm's types
// without a cycle in tests, so it keeps its own small tables.
var dtypeNames = [...]string{"?", "float32", "float64", "int32", "int64", "uint8", "bfloat16", "float16"}
var redNames = [...]string{"?", "sum", "avg", "prod", "min", "max", "band", "bor", "bxor"}

func dtypeName(d uint8) string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", d)
}

func redName(r uint8) string {
	if int(r) < len(redNames) {
		return redNames[r]
	}
	return fmt.Sprintf("op(%d)", r)
}

// Match checks that got (a received frame) belongs to the message want
// describes. Offset, Len and Step are per frame and checked by the caller.
func Match(got, want Header) error {
	if got.Kind != want.Kind || got.Op != want.Op || got.DType != want.DType || got.Red != want.Red ||
		got.Algo != want.Algo || got.Group != want.Group || got.Seq != want.Seq || got.Count != want.Count ||
		got.Root != want.Root || got.Step != want.Step || got.Total != want.Total {
		return &MismatchError{Got: got, Want: want}
	}
	return nil
}

// CheckMessage checks the header a caller hands a transport's Send or
// Recv: a data kind (collective or point-to-point) with fields that Decode
// accepts (the framing fields Offset, Total and Len are the transport's).
func CheckMessage(h Header) error {
	if h.Kind != KindColl && h.Kind != KindP2P {
		return fmt.Errorf("message kind %v", h.Kind)
	}
	h.Offset, h.Total, h.Len = 0, 0, 0
	var b [HeaderSize]byte
	h.Encode(b[:])
	_, err := Decode(b[:])
	return err
}
