//go:build linux

// Command linewrite measures what the staged all-reduce's staging pays
// between two cores (issue 30, benchmarks/NOTES.md): a writer thread
// pinned to CPU 0 rewrites a block that a reader thread pinned to CPU 1
// copied out in the previous round, the reader copies it out again, and
// each side's median time per round is printed. -nt writes with
// streaming stores (vecmath.CopyNT) instead of ordinary ones; -shm puts
// the block in a MAP_SHARED /dev/shm mapping as comm/shm does.
//
//	go run ./benchmarks/commbench/linewrite -bytes 2097152
//	go run ./benchmarks/commbench/linewrite -bytes 2097152 -nt
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/gdist/gdist/internal/vecmath"
)

func pin(cpu int) error {
	runtime.LockOSThread()
	var mask [16]uint64
	mask[cpu/64] |= 1 << (cpu % 64)
	if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, uintptr(len(mask)*8), uintptr(unsafe.Pointer(&mask[0]))); e != 0 {
		return fmt.Errorf("linewrite: pinning to CPU %d: %v (needs 2 CPUs)", cpu, e)
	}
	return nil
}

func median(ts []time.Duration) time.Duration {
	sort.Slice(ts, func(a, b int) bool { return ts[a] < ts[b] })
	return ts[len(ts)/2]
}

func main() {
	n := flag.Int("bytes", 512<<10, "block size")
	chunk := flag.Int("chunk", 64<<10, "copy unit (the staged all-reduce's is 64 KiB)")
	nt := flag.Bool("nt", false, "writer uses streaming stores (vecmath.CopyNT)")
	shm := flag.Bool("shm", false, "the block in a MAP_SHARED /dev/shm mapping")
	rounds := flag.Int("rounds", 200, "rounds")
	flag.Parse()
	if *n <= 0 || *chunk <= 0 || *rounds <= 0 {
		fmt.Fprintln(os.Stderr, "linewrite: -bytes, -chunk and -rounds must be positive")
		os.Exit(2)
	}
	block := make([]byte, *n)
	if *shm {
		f, err := os.CreateTemp("/dev/shm", "linewrite")
		if err == nil {
			os.Remove(f.Name())
			err = f.Truncate(int64(*n))
		}
		if err == nil {
			block, err = syscall.Mmap(int(f.Fd()), 0, *n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "linewrite: -shm:", err)
			os.Exit(1)
		}
	}
	src, dst := make([]byte, *n), make([]byte, *n)
	cp := func(d, s []byte) {
		for o := 0; o < len(s); o += *chunk {
			e := min(o+*chunk, len(s))
			if *nt {
				vecmath.CopyNT(d[o:e], s[o:e])
			} else {
				copy(d[o:e], s[o:e])
			}
		}
	}
	var turn atomic.Int64
	wt, rt := make([]time.Duration, 0, *rounds), make([]time.Duration, 0, *rounds)
	errc := make(chan error, 1)
	go func() {
		if err := pin(0); err != nil {
			errc <- err
			turn.Store(-1)
			return
		}
		for i := 1; i <= *rounds; i++ {
			for turn.Load() != int64(2*i-2) {
			}
			t0 := time.Now()
			cp(block, src)
			wt = append(wt, time.Since(t0))
			turn.Store(int64(2*i - 1))
		}
		errc <- nil
	}()
	if err := pin(1); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for i := 1; i <= *rounds; i++ {
		for {
			v := turn.Load()
			if v < 0 {
				fmt.Fprintln(os.Stderr, <-errc)
				os.Exit(1)
			}
			if v == int64(2*i-1) {
				break
			}
		}
		t0 := time.Now()
		for o := 0; o < *n; o += *chunk {
			e := min(o+*chunk, *n)
			copy(dst[o:e], block[o:e])
		}
		rt = append(rt, time.Since(t0))
		turn.Store(int64(2 * i))
	}
	if err := <-errc; err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w, r := median(wt), median(rt)
	fmt.Printf("bytes %d nt %v shm %v: writer (rewrites what the other core read) %v, %.1f GB/s; reader %v, %.1f GB/s\n",
		*n, *nt, *shm, w, float64(*n)/w.Seconds()/1e9, r, float64(*n)/r.Seconds()/1e9)
}
