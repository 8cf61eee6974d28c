package tcp

import (
	"math/bits"
	"sync"

	"github.com/gdist/gdist/comm/internal/wire"
)

// Payload buffers for frames that arrive before their receive is posted,
// and the reader's staging buffer for RecvPayload, come from pools of
// power-of-two size classes (minBufShift up to wire.MaxFrame), so that the
// steady state neither allocates nor zeroes them.
const (
	minBufShift = 12
	maxBufShift = 22
)

// Compile-time check: the largest class holds a whole frame.
const _ = uint(1<<maxBufShift - wire.MaxFrame)

var bufPools [maxBufShift - minBufShift + 1]sync.Pool

// bufClass returns the size class holding n bytes.
func bufClass(n int) int {
	if n <= 1<<minBufShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minBufShift
}

// getBuf returns a buffer of length n (not zeroed); n <= wire.MaxFrame.
func getBuf(n int) []byte {
	if n == 0 {
		return nil
	}
	c := bufClass(n)
	if p, ok := bufPools[c].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<(c+minBufShift))
}

// putBuf gives b back to its pool; b must not be used afterwards. Buffers
// that getBuf did not make (another capacity) are left to the collector.
func putBuf(b []byte) {
	n := cap(b)
	if n < 1<<minBufShift || n > wire.MaxFrame || n&(n-1) != 0 {
		return
	}
	b = b[:n]
	bufPools[bufClass(n)].Put(&b)
}
