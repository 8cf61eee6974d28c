// Command peerbench measures all-reduce against the peers on this machine,
// side by side in one run: our commbench on each of its CPU backends, Open
// MPI's MPI_Allreduce (benchmarks/peers/mpi_allreduce.c, built with mpicc)
// and PyTorch's Gloo (benchmarks/peers/gloo_allreduce.py, run with
// /usr/bin/python3). All of them time float32 sum all-reduce the same way
// (3 untimed iterations, then about 64 MiB of traffic, 3..2000 iterations)
// and check the result. The shm (and auto) rows use buffers from
// comm.Alloc (commbench -alloc), the zero-copy all-reduce in the job's
// shared memory; -alloc=false, or the pseudo-backend shm-ordinary, runs
// shm with ordinary buffers.
//
// The runs are interleaved: each repetition runs every implementation once
// per world size, in an order that rotates between repetitions, so that
// the machine's drifts hit all of them alike. The table reports, per size,
// the median time over the repetitions (bus bandwidth from it) and the
// ratios of our backends to the peers. It rewrites the peerbench section of
// benchmarks/NOTES.md and writes benchmarks/results/peer_results.json and
// one plot of bus bandwidth against size per world size
// (benchmarks/results/peer_allreduce_w<N>.png).
//
//	go run ./benchmarks/peerbench -worlds 2,4 -reps 3
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/gdist/gdist/benchmarks/internal/readme"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// row is one size of one run, in commbench's -json schema.
type row struct {
	Op      string  `json:"op"`
	Backend string  `json:"backend"`
	World   int     `json:"world"`
	Bytes   int64   `json:"bytes"`
	TimeUS  float64 `json:"time_us"`
	BusBW   float64 `json:"busbw_gbs"`
	Correct bool    `json:"correct"`
}

// cell is the median of one implementation at one world size and size.
type cell struct {
	Impl   string    `json:"impl"`
	World  int       `json:"world"`
	Bytes  int64     `json:"bytes"`
	TimeUS float64   `json:"time_us"`   // median
	BusBW  float64   `json:"busbw_gbs"` // from the median time
	Runs   []float64 `json:"time_us_runs"`
}

func main() {
	worlds := flag.String("worlds", "2,4", "world sizes")
	sizes := flag.String("sizes", "4K,16K,64K,256K,1M,4M,16M,64M", "message sizes (K, M suffixes)")
	backends := flag.String("backends", "shm,tcp,inproc", "our commbench backends (shm-ordinary: shm with ordinary buffers, for comparison with -alloc)")
	alloc := flag.Bool("alloc", true, "shm and auto rows use buffers from comm.Alloc (commbench -alloc: zero-copy all-reduce in shared memory)")
	reps := flag.Int("reps", 3, "repetitions (median reported)")
	mpi := flag.Bool("mpi", true, "run the Open MPI peer (needs mpicc and mpirun)")
	gloo := flag.String("gloo", "benchmarks/peers/gloo_allreduce.py", "the Gloo peer script (empty: skip)")
	python := flag.String("python", "/usr/bin/python3", "Python with torch for the Gloo peer")
	readmePath := flag.String("readme", "benchmarks/NOTES.md", "file whose peerbench section is rewritten")
	out := flag.String("out", "benchmarks/results", "directory for peer_results.json and the plots")
	bind := flag.Bool("bind", true, "pin each rank of commbench's process backends to one CPU (commbench -bind) when the world fits this machine's CPUs, as mpirun binds Open MPI's ranks to cores by default; -bind=false: never")
	flag.Parse()

	var sz []int64
	for _, s := range strings.Split(*sizes, ",") {
		n, err := parseSize(s)
		if err != nil {
			fail("-sizes: %v", err)
		}
		sz = append(sz, n)
	}
	var ws []int
	for _, s := range strings.Split(*worlds, ",") {
		w, err := strconv.Atoi(s)
		if err != nil || w < 2 {
			fail("-worlds: bad world size %q", s)
		}
		ws = append(ws, w)
	}
	tmp, err := os.MkdirTemp("", "peerbench")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(tmp)
	cb := filepath.Join(tmp, "commbench")
	if o, err := exec.Command("go", "build", "-o", cb, "./benchmarks/commbench").CombinedOutput(); err != nil {
		fail("building commbench: %v\n%s", err, o)
	}
	var impls []impl
	sizeArgs := make([]string, len(sz))
	for i, n := range sz {
		sizeArgs[i] = strconv.FormatInt(n, 10)
	}
	var notes []string
	for _, b := range strings.Split(*backends, ",") {
		args := []string{"-backend", b, "-ops", "all_reduce", "-sizes", strings.Join(sizeArgs, ","), "-json"}
		switch {
		case b == "shm-ordinary":
			args[1] = "shm"
		case *alloc && (b == "shm" || b == "auto"):
			args = append(args, "-alloc")
			notes = append(notes, fmt.Sprintf("%s: buffers from comm.Alloc (commbench -alloc), in the job's shared memory: the zero-copy all-reduce.", b))
		}
		impls = append(impls, impl{b, func(w int) *exec.Cmd {
			a := append(append([]string(nil), args...), "-np", strconv.Itoa(w))
			if *bind && b != "inproc" && w <= runtime.NumCPU() {
				a = append(a, "-bind")
			}
			return exec.Command(cb, a...)
		}})
	}
	if *bind {
		notes = append(notes, fmt.Sprintf("Process backends ran with commbench -bind (a rank per CPU, GOMAXPROCS 1) where the world fits the %d CPUs, as mpirun binds Open MPI's ranks by default.", runtime.NumCPU()))
	}
	if *mpi {
		bin := filepath.Join(tmp, "mpi_allreduce")
		if o, err := exec.Command("mpicc", "-O2", "-o", bin, "benchmarks/peers/mpi_allreduce.c").CombinedOutput(); err != nil {
			notes = append(notes, fmt.Sprintf("Open MPI peer skipped: mpicc failed: %v %s", err, bytes.TrimSpace(o)))
		} else {
			impls = append(impls, impl{"openmpi", func(w int) *exec.Cmd {
				return exec.Command("mpirun", append([]string{"--allow-run-as-root", "--oversubscribe", "-np", strconv.Itoa(w), bin}, sizeArgs...)...)
			}})
		}
	}
	if *gloo != "" {
		if err := exec.Command(*python, "-c", "import torch.distributed").Run(); err != nil {
			notes = append(notes, fmt.Sprintf("Gloo peer skipped: %s cannot import torch.distributed", *python))
		} else {
			impls = append(impls, impl{"gloo", func(w int) *exec.Cmd {
				return exec.Command(*python, append([]string{*gloo, strconv.Itoa(w)}, sizeArgs...)...)
			}})
		}
	}

	type key struct {
		impl  string
		world int
		bytes int64
	}
	times := map[key][]float64{}
	for rep := 0; rep < *reps; rep++ {
		for _, w := range ws {
			for i := range impls {
				im := impls[(i+rep)%len(impls)]
				cmd := im.cmd(w)
				cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1")
				var o, e bytes.Buffer
				cmd.Stdout, cmd.Stderr = &o, &e
				t0 := time.Now()
				if err := cmd.Run(); err != nil {
					fail("%s at %d ranks: %v\n%s%s", im.name, w, err, o.String(), e.String())
				}
				sc := bufio.NewScanner(&o)
				n := 0
				for sc.Scan() {
					line := strings.TrimSpace(sc.Text())
					if !strings.HasPrefix(line, "{") {
						continue
					}
					var r row
					if err := json.Unmarshal([]byte(line), &r); err != nil {
						fail("%s: bad row %q: %v", im.name, line, err)
					}
					if r.Op != "all_reduce" {
						continue
					}
					if !r.Correct {
						fail("%s at %d ranks, %d bytes: wrong result", im.name, w, r.Bytes)
					}
					k := key{im.name, w, r.Bytes}
					times[k] = append(times[k], r.TimeUS)
					n++
				}
				if n != len(sz) {
					fail("%s at %d ranks: %d rows, want %d:\n%s%s", im.name, w, n, len(sz), o.String(), e.String())
				}
				fmt.Fprintf(os.Stderr, "rep %d: %-8s %d ranks: %.1fs\n", rep, im.name, w, time.Since(t0).Seconds())
			}
		}
	}

	var cells []cell
	get := map[key]cell{}
	for _, w := range ws {
		for _, im := range impls {
			for _, n := range sz {
				k := key{im.name, w, n}
				ts := append([]float64(nil), times[k]...)
				sort.Float64s(ts)
				med := ts[len(ts)/2]
				c := cell{Impl: im.name, World: w, Bytes: n, TimeUS: med, Runs: times[k],
					BusBW: float64(n) / (med * 1e-6) / 1e9 * 2 * float64(w-1) / float64(w)}
				cells = append(cells, c)
				get[k] = c
			}
		}
	}
	b, _ := json.MarshalIndent(cells, "", " ")
	if err := os.WriteFile(filepath.Join(*out, "peer_results.json"), b, 0o644); err != nil {
		fail("%v", err)
	}

	var t strings.Builder
	fmt.Fprintf(&t, "float32 sum all-reduce, %s, median of %d interleaved repetitions; bus bandwidth in GB/s (nccl-tests' definition: algbw x 2(n-1)/n) from the median time. Ratios are ours over the peer's bus bandwidth (> 1: we are faster).\n",
		time.Now().UTC().Format("2006-01-02"), *reps)
	for _, n := range notes {
		fmt.Fprintf(&t, "\n%s\n", n)
	}
	have := map[string]bool{}
	for _, im := range impls {
		have[im.name] = true
	}
	var ratios [][2]string
	for _, ours := range []string{"shm", "shm-ordinary", "tcp", "inproc"} {
		for _, peer := range []string{"openmpi", "gloo"} {
			if have[ours] && have[peer] {
				ratios = append(ratios, [2]string{ours, peer})
			}
		}
	}
	for _, w := range ws {
		fmt.Fprintf(&t, "\n**%d ranks**\n\n| size |", w)
		for _, im := range impls {
			fmt.Fprintf(&t, " %s |", im.name)
		}
		for _, r := range ratios {
			fmt.Fprintf(&t, " %s / %s |", r[0], r[1])
		}
		t.WriteString("\n|---:|")
		for range len(impls) + len(ratios) {
			t.WriteString("---:|")
		}
		t.WriteString("\n")
		for _, n := range sz {
			fmt.Fprintf(&t, "| %s |", human(n))
			for _, im := range impls {
				c := get[key{im.name, w, n}]
				if n <= 64<<10 {
					fmt.Fprintf(&t, " %.3f (%.1f us) |", c.BusBW, c.TimeUS)
				} else {
					fmt.Fprintf(&t, " %.3f |", c.BusBW)
				}
			}
			for _, r := range ratios {
				a, p := get[key{r[0], w, n}], get[key{r[1], w, n}]
				fmt.Fprintf(&t, " %.2f |", a.BusBW/p.BusBW)
			}
			t.WriteString("\n")
		}
		name := fmt.Sprintf("peer_allreduce_w%d.png", w)
		if err := plotBW(cells, impls2names(impls), w, filepath.Join(*out, name)); err != nil {
			fail("plot: %v", err)
		}
		fmt.Fprintf(&t, "\n![all-reduce bus bandwidth at %d ranks](%s)\n", w, readme.Link(*readmePath, filepath.Join(*out, name)))
	}
	fmt.Println(t.String())
	if *readmePath != "" {
		if err := readme.Rewrite(*readmePath, "peerbench", t.String()); err != nil {
			fail("%v", err)
		}
	}
}

// impl is one implementation: its name and the command that runs it at a
// world size.
type impl struct {
	name string
	cmd  func(world int) *exec.Cmd
}

func impls2names(ims []impl) []string {
	var s []string
	for _, im := range ims {
		s = append(s, im.name)
	}
	return s
}

func plotBW(cells []cell, names []string, world int, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("all-reduce float32, %d ranks on this machine", world)
	p.X.Label.Text = "message size (bytes, log2)"
	p.Y.Label.Text = "bus bandwidth (GB/s)"
	var args []any
	for _, name := range names {
		var xy plotter.XYs
		for _, c := range cells {
			if c.Impl == name && c.World == world {
				xy = append(xy, plotter.XY{X: math.Log2(float64(c.Bytes)), Y: c.BusBW})
			}
		}
		args = append(args, name, xy)
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	p.Legend.Top, p.Legend.Left = true, true
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mul := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mul, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mul, s = 1<<20, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || n*mul%4 != 0 {
		return 0, fmt.Errorf("bad size %q (a positive multiple of 4 bytes)", s)
	}
	return n * mul, nil
}

func human(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "peerbench: "+format+"\n", args...)
	os.Exit(1)
}
