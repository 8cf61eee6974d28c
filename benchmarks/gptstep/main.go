// Command gptstep times one GPT training step (forward, cross-entropy,
// backward and, unless -optim=false, AdamW) of gdist and of PyTorch
// (benchmarks/peers/gpt_step.py, the same model from peers/gpt.py) side by
// side: -rounds alternating rounds, each side in a fresh process at
// -threads threads (gdist: GOMAXPROCS and OPENBLAS_NUM_THREADS; PyTorch:
// torch.set_num_threads, OMP_NUM_THREADS and MKL_NUM_THREADS), -warmup
// untimed steps then -steps timed ones. Each round prints both sides'
// median wall and CPU time per step and the load average before it; the
// end prints the medians over the rounds and gdist's speed as a multiple
// of PyTorch's (tokens/s, by wall time and by CPU time).
//
// From the repository root:
//
//	go run ./benchmarks/gptstep -model gpt-L4-D256-H4-T128 -batch 32 -threads 1 -rounds 5
//
// Both sides use the tokens x[i] = 7i mod 256 and labels 7i+1 mod 256.
// -impls gdist with -cpuprofile profiles gdist's timed steps.
// -openblas-coretype sets OPENBLAS_CORETYPE for both sides: OpenBLAS
// 0.3.21 runs its Haswell (AVX2) kernels on an AVX-512 CPU it does not
// know (this machine's Zen 5), at about half the sgemm speed of its
// SkylakeX kernels there.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

type result struct {
	Impl    string    `json:"impl"`
	Threads int       `json:"threads"`
	WallMs  []float64 `json:"wall_ms"`
	CPUMs   []float64 `json:"cpu_ms"`
	Load    string    `json:"-"`
}

func main() {
	model := flag.String("model", "gpt-L4-D256-H4-T128", "gpt-L<layers>-D<dim>-H<heads>-T<context>")
	batch := flag.Int("batch", 32, "sequences per step")
	steps := flag.Int("steps", 8, "timed steps per process")
	warmup := flag.Int("warmup", 2, "untimed steps first")
	rounds := flag.Int("rounds", 3, "alternating rounds (a fresh process per side each)")
	threads := flag.Int("threads", 1, "threads per side")
	useOpt := flag.Bool("optim", true, "include the AdamW update (lr 3e-3) on both sides")
	impls := flag.String("impls", "gdist,torch", "sides to run, in this order each round")
	peer := flag.String("torch", "benchmarks/peers/gpt_step.py", "the PyTorch side's script")
	python := flag.String("python", "/usr/bin/python3", "python with torch")
	worker := flag.Bool("worker", false, "internal: run gdist's side in this process and print its JSON line")
	cpuprofile := flag.String("cpuprofile", "", "gdist's side: write a CPU profile of the timed steps here")
	coretype := flag.String("openblas-coretype", "", "set OPENBLAS_CORETYPE to this for both sides (both use OpenBLAS's sgemm), e.g. SkylakeX where OpenBLAS takes an AVX-512 CPU for Haswell")
	flag.Parse()

	g, ok := models.ParseGPT(*model)
	if !ok {
		fail("-model %q: want gpt-L<layers>-D<dim>-H<heads>-T<context>, e.g. gpt-L4-D256-H4-T128", *model)
	}
	if *batch < 1 || *steps < 1 || *warmup < 0 || *rounds < 1 || *threads < 1 {
		fail("-batch, -steps, -rounds and -threads must be positive, -warmup not negative")
	}
	if *worker {
		r, err := runGdist(g, *batch, *warmup, *steps, *useOpt, *cpuprofile)
		if err != nil {
			fail("gdist: %v", err)
		}
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
		return
	}
	self, err := os.Executable()
	if err != nil {
		fail("%v", err)
	}
	sides := strings.Split(*impls, ",")
	for _, s := range sides {
		if s != "gdist" && s != "torch" {
			fail("-impls: %q is neither gdist nor torch", s)
		}
	}
	ctx := context.Background()
	th := strconv.Itoa(*threads)
	common := []string{"-steps", strconv.Itoa(*steps), "-warmup", strconv.Itoa(*warmup)}
	fmt.Printf("%s batch %d, %d threads each, optimizer update %v, %d rounds of %d steps after %d, OPENBLAS_CORETYPE %q; %s\n",
		*model, *batch, *threads, *useOpt, *rounds, *steps, *warmup, *coretype, time.Now().UTC().Format(time.RFC3339))
	med := map[string][][2]float64{}
	for r := 1; r <= *rounds; r++ {
		for _, side := range sides {
			var cmd *exec.Cmd
			if side == "gdist" {
				args := append([]string{"-worker", "-model", *model, "-batch", strconv.Itoa(*batch), "-optim=" + strconv.FormatBool(*useOpt), "-cpuprofile", *cpuprofile}, common...)
				cmd = exec.CommandContext(ctx, self, args...)
				cmd.Env = append(os.Environ(), "GOMAXPROCS="+th, "OPENBLAS_NUM_THREADS="+th)
			} else {
				args := []string{*peer, "--layers", strconv.Itoa(g.Layers), "--dim", strconv.Itoa(g.Dim), "--heads", strconv.Itoa(g.Heads),
					"--context", strconv.Itoa(g.Context), "--batch", strconv.Itoa(*batch), "--steps", strconv.Itoa(*steps),
					"--warmup", strconv.Itoa(*warmup), "--threads", th}
				if !*useOpt {
					args = append(args, "--no-optim")
				}
				cmd = exec.CommandContext(ctx, *python, args...)
				cmd.Env = append(os.Environ(), "OMP_NUM_THREADS="+th, "MKL_NUM_THREADS="+th, "OPENBLAS_NUM_THREADS="+th)
			}
			if *coretype != "" {
				cmd.Env = append(cmd.Env, "OPENBLAS_CORETYPE="+*coretype)
			}
			load := loadavg()
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				fail("round %d, %s: %v\n%s", r, side, err, stderr.String())
			}
			var res result
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
				fail("round %d, %s: output %q: %v", r, side, out, err)
			}
			w, c := median(res.WallMs), median(res.CPUMs)
			med[side] = append(med[side], [2]float64{w, c})
			fmt.Printf("round %d  %-18s threads %d  wall %7.1f ms  cpu %7.1f ms  %6.0f tokens/s  load %s\n",
				r, res.Impl, res.Threads, w, c, float64(*batch*g.Context)/w*1e3, load)
		}
	}
	fmt.Printf("after: load %s\n", loadavg())
	var mw, mc = map[string]float64{}, map[string]float64{}
	for side, v := range med {
		var ws, cs []float64
		for _, x := range v {
			ws, cs = append(ws, x[0]), append(cs, x[1])
		}
		mw[side], mc[side] = median(ws), median(cs)
		fmt.Printf("median over rounds  %-5s wall %7.1f ms  cpu %7.1f ms  %6.0f tokens/s\n", side, mw[side], mc[side], float64(*batch*g.Context)/mw[side]*1e3)
	}
	if mw["gdist"] > 0 && mw["torch"] > 0 {
		fmt.Printf("gdist / PyTorch tokens/s: %.3fx by wall time, %.3fx by CPU time\n", mw["torch"]/mw["gdist"], mc["torch"]/mc["gdist"])
	}
}

// runGdist builds the model and times its steps in this process.
func runGdist(g models.GPT, batch, warmup, steps int, useOpt bool, cpuprofile string) (*result, error) {
	nn.SetBLASThreads(runtime.GOMAXPROCS(0))
	m, err := models.NewGPT(g.Name(), g, 1)
	if err != nil {
		return nil, err
	}
	gr, err := m.NewGraph(batch, true)
	if err != nil {
		return nil, err
	}
	x := make([]float32, batch*m.InputSize())
	y := make([]int32, batch*m.LabelsPerSample())
	for i := range x {
		x[i] = float32((i * 7) % models.Vocab)
	}
	for i := range y {
		y[i] = int32((i*7 + 1) % models.Vocab)
	}
	var opt optim.Optimizer
	if useOpt { // torch.optim.AdamW's defaults: weight decay 0.01 (gdist's is 0)
		if opt, err = optim.New(optim.Config{Name: "adamw", LR: 3e-3, WeightDecay: 0.01}, len(m.Flat.Value)); err != nil {
			return nil, err
		}
	}
	ctx := context.Background()
	step := func() error {
		m.ZeroGrad()
		if _, err := gr.Step(ctx, x, y); err != nil {
			return err
		}
		if opt != nil {
			opt.Step(m.Flat.Value, m.Flat.Grad)
		}
		return nil
	}
	for i := 0; i < warmup; i++ {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	r := &result{Impl: "gdist", Threads: runtime.GOMAXPROCS(0)}
	for i := 0; i < steps; i++ {
		t, c := time.Now(), cpuTime()
		if err := step(); err != nil {
			return nil, err
		}
		r.WallMs = append(r.WallMs, float64(time.Since(t).Microseconds())/1e3)
		r.CPUMs = append(r.CPUMs, (cpuTime()-c)*1e3)
	}
	return r, nil
}

// cpuTime is the process's user and system time in seconds.
func cpuTime() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// loadavg is /proc/loadavg's 1, 5 and 15 minute averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "gptstep: "+format+"\n", a...)
	os.Exit(1)
}
