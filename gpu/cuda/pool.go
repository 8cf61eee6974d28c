package cuda

import (
	"fmt"
	"math/bits"
	"sync"
)

// Block is memory from a Pool: Bytes usable bytes at Ptr (a device address,
// or the address of Host for pinned memory).
type Block struct {
	Ptr   uintptr
	Host  []byte // pinned pools only: Host[:Bytes]
	Bytes int
	class int // capacity is 1<<class
	mem   []byte
}

// Pool caches device or pinned host allocations of power-of-two sizes, so
// that staging buffers are not allocated per operation (cudaMalloc and
// cudaHostAlloc are slow and may synchronize the device). It is safe for
// concurrent use.
type Pool struct {
	pinned bool
	device int
	limit  int64

	mu     sync.Mutex
	free   map[int][]*Block
	cached int64
	closed bool
}

// NewPinnedPool returns a pool of pinned host memory that keeps at most
// limit bytes of idle blocks.
func NewPinnedPool(limit int64) *Pool {
	return &Pool{pinned: true, limit: limit, free: map[int][]*Block{}}
}

// NewDevicePool returns a pool of memory on device that keeps at most limit
// bytes of idle blocks.
func NewDevicePool(device int, limit int64) *Pool {
	return &Pool{device: device, limit: limit, free: map[int][]*Block{}}
}

const minClass = 8 // 256 bytes

// Get returns a block of at least n bytes (n > 0).
func (p *Pool) Get(n int) (*Block, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: Pool.Get(%d)", n)
	}
	class := max(minClass, bits.Len(uint(n-1)))
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("cuda: pool is closed")
	}
	if fl := p.free[class]; len(fl) > 0 {
		b := fl[len(fl)-1]
		p.free[class] = fl[:len(fl)-1]
		p.cached -= 1 << class
		p.mu.Unlock()
		b.Bytes = n
		if p.pinned {
			b.Host = b.mem[:n]
		}
		return b, nil
	}
	p.mu.Unlock()
	b := &Block{Bytes: n, class: class}
	if p.pinned {
		m, err := HostAlloc(1 << class)
		if err != nil {
			return nil, err
		}
		b.mem, b.Host = m, m[:n]
		b.Ptr = addrOf(m)
		return b, nil
	}
	ptr, err := Malloc(p.device, 1<<class)
	if err != nil {
		return nil, err
	}
	b.Ptr = ptr
	return b, nil
}

// Put gives b back; it is freed at once if the pool is closed or full.
func (p *Pool) Put(b *Block) {
	if b == nil {
		return
	}
	p.mu.Lock()
	if p.closed || p.cached+1<<b.class > p.limit {
		p.mu.Unlock()
		p.release(b)
		return
	}
	p.free[b.class] = append(p.free[b.class], b)
	p.cached += 1 << b.class
	p.mu.Unlock()
}

func (p *Pool) release(b *Block) {
	if p.pinned {
		FreeHost(b.mem)
	} else {
		Free(p.device, b.Ptr)
	}
}

// Close frees the idle blocks, in the background (cudaFree waits for the
// whole device, which may be busy for long); blocks handed out are freed
// when Put back.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	free := p.free
	p.free = map[int][]*Block{}
	p.cached = 0
	p.mu.Unlock()
	if len(free) == 0 {
		return
	}
	go func() {
		for _, fl := range free {
			for _, b := range fl {
				p.release(b)
			}
		}
	}()
}

// Discard frees b instead of caching it (for memory that work which failed
// may still touch: cudaFree waits for the device).
func (p *Pool) Discard(b *Block) {
	if b != nil {
		p.release(b)
	}
}
