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
//
// No Pool method frees memory in the caller's goroutine: cudaFree and
// cudaFreeHost wait until the device has done all its work, and Put and
// Discard run on completion paths where that work may include NCCL kernels
// waiting for peers that wait for this rank (a stall, or with three ranks a
// hang). Blocks to free go to one background goroutine per pool.
type Pool struct {
	pinned bool
	device int
	limit  int64

	mu      sync.Mutex
	free    map[int][]*Block
	cached  int64
	closed  bool
	trash   []*Block // to free, by the freeing goroutine
	freeing bool     // the freeing goroutine runs
	idle    *sync.Cond
}

// NewPinnedPool returns a pool of pinned host memory that keeps at most
// limit bytes of idle blocks. device is the GPU made current when the
// memory is allocated and freed (the calls need a CUDA context: pass the
// caller's GPU); the memory is usable from every device.
func NewPinnedPool(device int, limit int64) *Pool {
	return &Pool{pinned: true, device: device, limit: limit, free: map[int][]*Block{}}
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
		m, err := HostAlloc(p.device, 1<<class)
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

// Put gives b back without blocking; it is freed in the background if the
// pool is closed or full.
func (p *Pool) Put(b *Block) {
	if b == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.cached+1<<b.class > p.limit {
		p.discardLocked(b)
		return
	}
	p.free[b.class] = append(p.free[b.class], b)
	p.cached += 1 << b.class
}

// discardLocked queues b for the freeing goroutine (p.mu held).
func (p *Pool) discardLocked(bs ...*Block) {
	p.trash = append(p.trash, bs...)
	if !p.freeing && len(p.trash) > 0 {
		p.freeing = true
		go p.freeTrash()
	}
}

// freeTrash frees the queued blocks, one at a time, until none is left.
func (p *Pool) freeTrash() {
	p.mu.Lock()
	for len(p.trash) > 0 {
		b := p.trash[0]
		p.trash = p.trash[1:]
		p.mu.Unlock()
		if p.pinned {
			FreeHost(p.device, b.mem)
		} else {
			Free(p.device, b.Ptr)
		}
		p.mu.Lock()
	}
	p.freeing = false
	if p.idle != nil {
		p.idle.Broadcast()
	}
	p.mu.Unlock()
}

// Close frees the idle blocks in the background and returns at once;
// blocks handed out are freed when Put back.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, fl := range p.free {
		p.discardLocked(fl...)
	}
	p.free = map[int][]*Block{}
	p.cached = 0
}

// Discard frees b, in the background, instead of caching it (for memory
// that work which failed may still touch).
func (p *Pool) Discard(b *Block) {
	if b == nil {
		return
	}
	p.mu.Lock()
	p.discardLocked(b)
	p.mu.Unlock()
}

// Flush blocks until every block given back to be freed so far is freed
// (for tests and orderly shutdown; it waits for the device like cudaFree).
func (p *Pool) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle == nil {
		p.idle = sync.NewCond(&p.mu)
	}
	for p.freeing {
		p.idle.Wait()
	}
}
