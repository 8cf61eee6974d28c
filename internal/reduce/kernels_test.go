package reduce

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/gdist/gdist/comm"
)

// The kernel tests compare every kernel set this machine can run with the
// scalar reference (kernels_ref.go), bit for bit.

func validOps(dt comm.DType) []comm.ReduceOp {
	var out []comm.ReduceOp
	for _, op := range comm.ReduceOps() {
		if comm.CheckReduce(dt, op) == nil {
			out = append(out, op)
		}
	}
	return out
}

// specials are values of interest for each float type, as float64.
var specials = []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1.5, 2.5, -2.5, 3, 65504, 65520, -65520, 1e-8, 6e-8, 5.96e-8,
	2.98e-8, 1e-40, -1e-40, 1e-45, 1e38, 3.4e38, -3.4e38, 1e300, math.Inf(1), math.Inf(-1), math.NaN(), -math.NaN(),
	math.MaxFloat32, math.SmallestNonzeroFloat32, math.SmallestNonzeroFloat64, 1 + 1.0/256, 1 + 1.0/512, 1 + 3.0/512}

// fillRandom fills b with a mix of random bit patterns (NaNs with payloads,
// infinities, subnormals included), special values, and random numbers of
// moderate size.
func fillRandom(rng *rand.Rand, dt comm.DType, b []byte) {
	es := dt.Size()
	for i := 0; i+es <= len(b); i += es {
		e := b[i : i+es]
		switch k := rng.IntN(8); {
		case k < 3: // random bits
			for j := range e {
				e[j] = byte(rng.Uint32())
			}
		case k < 5:
			putFloat(dt, e, specials[rng.IntN(len(specials))])
		default:
			putFloat(dt, e, (rng.Float64()-0.5)*math.Pow(2, float64(rng.IntN(40)-20)))
		}
		if dt == comm.Float32 || dt == comm.Float64 || dt.Size() == 2 {
			continue
		}
		if rng.IntN(4) == 0 { // integers: small values too
			for j := range e {
				e[j] = 0
			}
			e[0] = byte(rng.IntN(5))
		}
	}
}

func putFloat(dt comm.DType, e []byte, v float64) {
	le := binary.LittleEndian
	switch dt {
	case comm.Float32:
		le.PutUint32(e, math.Float32bits(float32(v)))
	case comm.Float64:
		le.PutUint64(e, math.Float64bits(v))
	case comm.BFloat16:
		le.PutUint16(e, uint16(comm.ToBF16(float32(v))))
	case comm.Float16:
		le.PutUint16(e, uint16(comm.ToF16(float32(v))))
	case comm.Int32:
		le.PutUint32(e, uint32(int32(v*1000)))
	case comm.Int64:
		le.PutUint64(e, uint64(int64(v*1e6)))
	case comm.Uint8:
		e[0] = byte(int(v * 10))
	}
}

// refReduceTo is ReduceTo by the reference kernels, with one rule made
// explicit: a sum or product of two NaNs is a's NaN (quieted; for the
// 16-bit types, a's NaN rounded). The reference leaves that to the operand
// order the compiler picks for a commutative add, which -race changes.
func refReduceTo(dt comm.DType, op comm.ReduceOp, dst, a, b []byte) {
	t := append([]byte(nil), a[:len(dst)]...)
	reduceRef(dt, op, t, b)
	if op == comm.Sum || op == comm.Avg || op == comm.Prod {
		le := binary.LittleEndian
		es := dt.Size()
		for i := 0; i+es <= len(t); i += es {
			switch dt {
			case comm.Float32:
				x, y := le.Uint32(a[i:]), le.Uint32(b[i:])
				if x&0x7fffffff > 0x7f800000 && y&0x7fffffff > 0x7f800000 {
					le.PutUint32(t[i:], x|0x00400000)
				}
			case comm.Float64:
				x, y := le.Uint64(a[i:]), le.Uint64(b[i:])
				const inf = 0x7ff0000000000000
				if x&^(1<<63) > inf && y&^(1<<63) > inf {
					le.PutUint64(t[i:], x|1<<51)
				}
			case comm.BFloat16, comm.Float16:
				x, y := le.Uint16(a[i:]), le.Uint16(b[i:])
				to32, from32 := bf16to32, bf16from32
				if dt == comm.Float16 {
					to32, from32 = f16to32, f16from32
				}
				if fx, fy := to32(x), to32(y); fx != fx && fy != fy {
					le.PutUint16(t[i:], from32(fx))
				}
			}
		}
	}
	copy(dst, t)
}

func describeDiff(dt comm.DType, got, want, a, b []byte) string {
	es := dt.Size()
	for i := 0; i+es <= len(want); i += es {
		if !bytes.Equal(got[i:i+es], want[i:i+es]) {
			return fmt.Sprintf("element %d: a=%x b=%x: got %x, want %x", i/es, a[i:i+es], b[i:i+es], got[i:i+es], want[i:i+es])
		}
	}
	return "trailing bytes differ"
}

// sameResult compares a kernel's output with the oracle's. The portable
// set's float32/float64 sum and product return either NaN when both inputs
// are NaNs (the compiler picks the operand order, see goNum); there it
// accepts a's or b's NaN, quieted.
func sameResult(s *kernelSet, dt comm.DType, op comm.ReduceOp, got, want, a, b []byte) bool {
	if bytes.Equal(got, want) {
		return true
	}
	if s.name != "go" || (dt != comm.Float32 && dt != comm.Float64) || (op != comm.Sum && op != comm.Avg && op != comm.Prod) {
		return false
	}
	le := binary.LittleEndian
	es := dt.Size()
	for i := 0; i+es <= len(want); i += es {
		if bytes.Equal(got[i:i+es], want[i:i+es]) {
			continue
		}
		if dt == comm.Float32 {
			x, y, g := le.Uint32(a[i:]), le.Uint32(b[i:]), le.Uint32(got[i:])
			nan := func(v uint32) bool { return v&0x7fffffff > 0x7f800000 }
			if !nan(x) || !nan(y) || g != y|0x00400000 {
				return false
			}
		} else {
			x, y, g := le.Uint64(a[i:]), le.Uint64(b[i:]), le.Uint64(got[i:])
			nan := func(v uint64) bool { return v&^(1<<63) > 0x7ff0000000000000 }
			if !nan(x) || !nan(y) || g != y|1<<51 {
				return false
			}
		}
	}
	return true
}

// withSet runs fn with each kernel set active in turn.
func eachSet(t *testing.T, fn func(t *testing.T, s *kernelSet)) {
	for _, s := range kernelSets() {
		t.Run(s.name, func(t *testing.T) { fn(t, s) })
	}
}

func TestKernelsMatchReference(t *testing.T) {
	lengths := []int{0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 129, 1000, 4099}
	big := 1000003
	if testing.Short() {
		big = 30011
	}
	lengths = append(lengths, big)
	eachSet(t, func(t *testing.T, s *kernelSet) {
		rng := rand.New(rand.NewPCG(1, 2))
		for _, dt := range comm.DTypes() {
			es := dt.Size()
			for _, op := range validOps(dt) {
				for _, n := range lengths {
					if n == big && op != comm.Sum && op != comm.Max && dt != comm.Float16 && dt != comm.BFloat16 {
						continue
					}
					for off := 0; off <= 3; off++ {
						if n == big && off != 1 {
							continue
						}
						sz := n * es
						abuf := make([]byte, sz+4*es)
						bbuf := make([]byte, sz+4*es)
						fillRandom(rng, dt, abuf)
						fillRandom(rng, dt, bbuf)
						a := abuf[off*es : off*es+sz]
						b := bbuf[(3-off)*es : (3-off)*es+sz]
						want := make([]byte, sz)
						refReduceTo(dt, op, want, a, b)
						// Three-operand, into a separate buffer with guard bytes.
						dbuf := make([]byte, sz+8*es)
						for i := range dbuf {
							dbuf[i] = 0xA5
						}
						d := dbuf[off*es : off*es+sz]
						s.bin[dt][op](d, a, b)
						if !sameResult(s, dt, op, d, want, a, b) {
							t.Fatalf("%v %v n=%d off=%d (dst=a op b): %s", dt, op, n, off, describeDiff(dt, d, want, a, b))
						}
						for i, v := range dbuf {
							if (i < off*es || i >= off*es+sz) && v != 0xA5 {
								t.Fatalf("%v %v n=%d off=%d: wrote outside dst at byte %d", dt, op, n, off, i)
							}
						}
						// In place on a (Reduce), and on b.
						a2 := append([]byte(nil), a...)
						s.bin[dt][op](a2, a2, b)
						if !sameResult(s, dt, op, a2, want, a, b) {
							t.Fatalf("%v %v n=%d off=%d (in place on a): %s", dt, op, n, off, describeDiff(dt, a2, want, a, b))
						}
						b2 := append([]byte(nil), b...)
						s.bin[dt][op](b2, a, b2)
						if !sameResult(s, dt, op, b2, want, a, b) {
							t.Fatalf("%v %v n=%d off=%d (in place on b): %s", dt, op, n, off, describeDiff(dt, b2, want, a, b))
						}
					}
				}
			}
		}
	})
}

func TestDivideMatchesReference(t *testing.T) {
	eachSet(t, func(t *testing.T, s *kernelSet) {
		rng := rand.New(rand.NewPCG(3, 4))
		for _, dt := range comm.DTypes() {
			es := dt.Size()
			counts := []int{0, 1, 5, 16, 17, 33, 1001, 70001}
			if testing.Short() {
				counts = counts[:7]
			}
			for _, n := range counts {
				for _, ranks := range []int{2, 3, 7, 8, 100, 300, 1000} {
					for off := 0; off < 2; off++ {
						buf := make([]byte, (n+2)*es)
						fillRandom(rng, dt, buf)
						x := buf[off*es : (off+n)*es]
						want := append([]byte(nil), x...)
						divideRef(dt, want, ranks)
						got := append(make([]byte, 0, len(buf)), buf...)
						s.div[dt](got[off*es:(off+n)*es], ranks)
						if !bytes.Equal(got[off*es:(off+n)*es], want) {
							t.Fatalf("%v n=%d /%d: %s", dt, n, ranks, describeDiff(dt, got[off*es:], want, x, x))
						}
						if !bytes.Equal(got[:off*es], buf[:off*es]) || !bytes.Equal(got[(off+n)*es:], buf[(off+n)*es:]) {
							t.Fatalf("%v n=%d: wrote outside the buffer", dt, n)
						}
					}
				}
			}
		}
	})
}

// TestKernel16Edges pairs every one of a set of edge values of the 16-bit
// types with every other: NaNs with payloads (quiet and signalling, both
// signs), infinities, the largest finite values (overflow on sum and
// product), subnormals (products that underflow to them and round to
// zero), and neighbours of rounding ties.
func TestKernel16Edges(t *testing.T) {
	var vals []uint16
	for _, v := range []uint16{0x0000, 0x8000, 0x0001, 0x8001, 0x0002, 0x03ff, 0x0400, 0x0401, 0x3c00, 0x3c01, 0x3bff, 0x7bff, 0xfbff,
		0x7c00, 0xfc00, 0x7c01, 0x7e00, 0xfe00, 0x7dff, 0x7fff, 0xffff, 0x3800, 0x1400, 0x1000, 0x0c00, 0x5bff, 0x2001} {
		vals = append(vals, v)
	}
	for _, v := range []uint16{0x7f80, 0xff80, 0x7f81, 0x7fc0, 0xffc1, 0x7fbf, 0x7f7f, 0xff7f, 0x0080, 0x0001, 0x807f,
		0x3f80, 0x3f81, 0x3b80, 0x4040, 0x0100, 0x1f80} {
		vals = append(vals, v)
	}
	n := len(vals) * len(vals)
	a, b := make([]byte, 2*n), make([]byte, 2*n)
	for i, x := range vals {
		for j, y := range vals {
			binary.LittleEndian.PutUint16(a[2*(i*len(vals)+j):], x)
			binary.LittleEndian.PutUint16(b[2*(i*len(vals)+j):], y)
		}
	}
	eachSet(t, func(t *testing.T, s *kernelSet) {
		for _, dt := range []comm.DType{comm.BFloat16, comm.Float16} {
			for _, op := range validOps(dt) {
				want, got := make([]byte, 2*n), make([]byte, 2*n)
				refReduceTo(dt, op, want, a, b)
				s.bin[dt][op](got, a, b)
				if !bytes.Equal(got, want) {
					t.Fatalf("%v %v: %s", dt, op, describeDiff(dt, got, want, a, b))
				}
			}
		}
	})
}

// TestKernel16Exhaustive runs every pair of 16-bit values through every
// 16-bit kernel (2^32 pairs per op); set GDIST_EXHAUSTIVE=1 (minutes).
func TestKernel16Exhaustive(t *testing.T) {
	if os.Getenv("GDIST_EXHAUSTIVE") == "" {
		t.Skip("set GDIST_EXHAUSTIVE=1 to run")
	}
	var sets []*kernelSet
	for _, s := range kernelSets() {
		if s.name != "go" { // the go set is checked by the random tests
			sets = append(sets, s)
		}
	}
	a := make([]byte, 2<<16)
	for i := 0; i < 1<<16; i++ {
		binary.LittleEndian.PutUint16(a[2*i:], uint16(i))
	}
	for _, dt := range []comm.DType{comm.BFloat16, comm.Float16} {
		for _, op := range validOps(dt) {
			var wg sync.WaitGroup
			errs := make(chan string, runtime.GOMAXPROCS(0))
			next := make(chan int, 1<<16)
			for y := 0; y < 1<<16; y++ {
				next <- y
			}
			close(next)
			for w := 0; w < runtime.GOMAXPROCS(0); w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					b, want, got := make([]byte, 2<<16), make([]byte, 2<<16), make([]byte, 2<<16)
					for y := range next {
						for i := 0; i < 1<<16; i++ {
							binary.LittleEndian.PutUint16(b[2*i:], uint16(y))
						}
						refReduceTo(dt, op, want, a, b)
						for _, s := range sets {
							s.bin[dt][op](got, a, b)
							if !bytes.Equal(got, want) {
								errs <- fmt.Sprintf("%s %v %v: %s", s.name, dt, op, describeDiff(dt, got, want, a, b))
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Fatal(e)
			}
		}
	}
}

// FuzzReduceTo checks every kernel set against the reference on arbitrary
// bytes; the first byte picks the dtype and op, the rest is split into a
// and b.
func FuzzReduceTo(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Add(bytes.Repeat([]byte{0xff, 0x7f, 0x80, 0x00, 0x01}, 41))
	f.Add(bytes.Repeat([]byte{0x11, 0x7c, 0x00, 0xfc, 0x01, 0x7f, 0x80, 0xff}, 67))
	sets := kernelSets()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		sel := int(data[0])
		data = data[1:]
		dt := comm.DTypes()[sel%len(comm.DTypes())]
		ops := validOps(dt)
		op := ops[(sel/len(comm.DTypes()))%len(ops)]
		es := dt.Size()
		n := len(data) / 2 / es * es
		a, b := data[:n], data[n:2*n]
		want := make([]byte, n)
		refReduceTo(dt, op, want, a, b)
		for _, s := range sets {
			got := make([]byte, n)
			s.bin[dt][op](got, a, b)
			if !sameResult(s, dt, op, got, want, a, b) {
				t.Fatalf("%s %v %v: %s", s.name, dt, op, describeDiff(dt, got, want, a, b))
			}
		}
	})
}

// TestReducePublic checks the exported entry points, which dispatch to the
// active set, including lengths that are not a whole number of elements.
func TestReducePublic(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dt := range comm.DTypes() {
		for _, op := range validOps(dt) {
			a, b := make([]byte, 1003*dt.Size()+1), make([]byte, 1003*dt.Size()+1)
			fillRandom(rng, dt, a)
			fillRandom(rng, dt, b)
			want := append([]byte(nil), a...)
			refReduceTo(dt, op, want[:len(want)/dt.Size()*dt.Size()], a, b)
			got := append([]byte(nil), a...)
			Into(dt, op, got, b)
			if !sameResult(active, dt, op, got, want, a, b) {
				t.Fatalf("Into %v %v: %s", dt, op, describeDiff(dt, got, want, a, b))
			}
			got3 := make([]byte, len(a))
			got3[len(got3)-1] = a[len(a)-1]
			To(dt, op, got3, a, b)
			if !sameResult(active, dt, op, got3, want, a, b) {
				t.Fatalf("To %v %v: %s", dt, op, describeDiff(dt, got3, want, a, b))
			}
		}
		x := make([]byte, 99*dt.Size())
		fillRandom(rng, dt, x)
		want := append([]byte(nil), x...)
		divideRef(dt, want, 6)
		Divide(dt, x, 6)
		if !bytes.Equal(x, want) {
			t.Fatalf("Divide %v: %s", dt, describeDiff(dt, x, want, x, x))
		}
	}
	t.Logf("kernel set: %s", KernelSet())
}
