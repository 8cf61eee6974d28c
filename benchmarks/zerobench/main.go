// Command zerobench is the DDP-vs-ZeRO experiment: for each world size and
// strategy it runs `train` on the 36.8M-parameter mlp-xl with Adam for a
// few steps and records, per rank, the model-state bytes held (next to the
// ZeRO paper's formulas), the peak including transient gathers, the bytes
// each rank moved per step (counted by the comm layer per transport: sent,
// or read from and written into peers' shared buffers by the zero-copy
// collectives, next to the paper's volumes) and the step time.
// It writes a markdown table into benchmarks/NOTES.md (between the
// zerobench markers), the runs as JSON (benchmarks/results/zero_results.json)
// and two PNG plots (benchmarks/results/zero_memory.png, zero_step.png).
//
//	go run ./benchmarks/zerobench -worlds 1,2,4,8 -steps 6
//
// With a gpt model it trains on the default text corpus (-warmup 0, the
// final evaluation at batch 8) and writes its own section and files:
//
//	go run ./benchmarks/zerobench -model gpt-large -worlds 1,2,4 -steps 6 -batch 8 \
//	    -section zerobench-gpt -out benchmarks/results/zero_gpt_results.json -plots zero_gpt
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/gdist/gdist/benchmarks/internal/readme"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

type run struct {
	Strategy    string  `json:"strategy"`
	World       int     `json:"world"`
	NumParams   int     `json:"num_params"`
	Params      int64   `json:"params_bytes"`
	Grads       int64   `json:"grads_bytes"`
	Optimizer   int64   `json:"optimizer_bytes"`
	Peak        int64   `json:"peak_bytes"`
	CommPerStep float64 `json:"comm_bytes_per_step"`
	// CommBy is CommPerStep per transport (shm, tcp).
	CommBy map[string]float64 `json:"comm_bytes_per_step_by_transport,omitempty"`
	StepMs float64            `json:"step_ms_p50"`
	RSS    int64              `json:"peak_rss_bytes"`
}

var strategies = []string{"ddp", "zero1", "zero2", "zero3"}

func main() {
	worlds := flag.String("worlds", "1,2,4,8", "world sizes")
	steps := flag.Int("steps", 6, "training steps per run")
	batch := flag.Int("batch", 16, "batch per rank")
	model := flag.String("model", "mlp-xl", "model")
	readmePath := flag.String("readme", "benchmarks/NOTES.md", "file whose zerobench section is rewritten")
	out := flag.String("out", "benchmarks/results/zero_results.json", "runs as JSON")
	pngDir := flag.String("png", "benchmarks/results", "directory for the plots")
	plotName := flag.String("plots", "zero", "the plots are <png>/<plots>_memory.png and <plots>_step.png")
	section := flag.String("section", "zerobench", "README section to rewrite: <!-- NAME:begin --> ... <!-- NAME:end -->")
	replot := flag.String("replot", "", "skip the runs: rebuild table and plots from this JSON file")
	flag.Parse()

	var runs []run
	if *replot != "" {
		b, err := os.ReadFile(*replot)
		if err != nil {
			fail("%v", err)
		}
		if err := json.Unmarshal(b, &runs); err != nil {
			fail("%v", err)
		}
	} else {
		bin := filepath.Join(os.TempDir(), "gdist-zerobench-train")
		if o, err := exec.Command("go", "build", "-o", bin, "./cmd/train").CombinedOutput(); err != nil {
			fail("building train: %v\n%s", err, o)
		}
		for _, ws := range strings.Split(*worlds, ",") {
			w, _ := strconv.Atoi(ws)
			for _, st := range strategies {
				r, err := once(bin, *model, st, w, *batch, *steps)
				if err != nil {
					fail("%s world %d: %v", st, w, err)
				}
				fmt.Fprintf(os.Stderr, "%-5s world %d: state %6.1f MB (peak %6.1f MB), moved %6.1f MB/step (%s), step %7.1f ms\n",
					st, w, mb(r.Params+r.Grads+r.Optimizer), mb(r.Peak), r.CommPerStep/1e6, transports(r.CommBy), r.StepMs)
				runs = append(runs, r)
			}
		}
		b, _ := json.MarshalIndent(runs, "", " ")
		if err := os.WriteFile(*out, b, 0o644); err != nil {
			fail("%v", err)
		}
	}
	table := report(runs, *model, *steps, *batch)
	fmt.Println(table)
	if err := plots(runs, *model, filepath.Join(*pngDir, *plotName)); err != nil {
		fail("plot: %v", err)
	}
	if err := readme.Rewrite(*readmePath, *section, table); err != nil {
		fail("%v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "zerobench: "+format+"\n", args...)
	os.Exit(1)
}

func mb(b int64) float64 { return float64(b) / 1e6 }

func once(bin, model, strategy string, world, batch, steps int) (run, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	args := []string{"-model", model, "-nproc", strconv.Itoa(world), "-strategy", strategy,
		"-optimizer", "adam", "-batch", strconv.Itoa(batch), "-max-steps", strconv.Itoa(steps), "-json", "-progress=false"}
	if strings.HasPrefix(model, "gpt") {
		args = append(args, "-warmup", "0", "-eval-batch", "8")
	} else {
		args = append(args, "-data", "synthetic", "-epochs", "1", "-eval-batch", "100")
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		return run{}, fmt.Errorf("%v\n%s", err, e.String())
	}
	lines := strings.Split(strings.TrimSpace(o.String()), "\n")
	var s struct {
		NumParams int `json:"num_params"`
		State     struct {
			Params, Grads, Optimizer int64
		} `json:"model_state_bytes"`
		Peak        int64              `json:"model_state_peak_bytes"`
		CommPerStep float64            `json:"comm_bytes_per_step"`
		CommBy      map[string]float64 `json:"comm_bytes_per_step_by_transport"`
		StepMs      float64            `json:"step_ms_p50"`
		RSS         int64              `json:"peak_rss_bytes"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		return run{}, fmt.Errorf("bad summary: %v", err)
	}
	return run{Strategy: strategy, World: world, NumParams: s.NumParams, Params: s.State.Params, Grads: s.State.Grads,
		Optimizer: s.State.Optimizer, Peak: s.Peak, CommPerStep: s.CommPerStep, CommBy: s.CommBy, StepMs: s.StepMs, RSS: s.RSS}, nil
}

// transports names the transports that moved the bytes, the most first
// ("shm", "shm 90% tcp 10%"; "-" if none was counted).
func transports(by map[string]float64) string {
	var names []string
	var total float64
	for t, n := range by {
		if n > 0 {
			names = append(names, t)
			total += n
		}
	}
	if len(names) == 0 {
		return "-"
	}
	sort.Slice(names, func(i, j int) bool { return by[names[i]] > by[names[j]] })
	if len(names) == 1 {
		return names[0]
	}
	var parts []string
	for _, t := range names {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", t, 100*by[t]/total))
	}
	return strings.Join(parts, " ")
}

// formula is the ZeRO paper's per-rank model state with Adam (K = 8).
func formula(strategy string, p, n float64) float64 {
	switch strategy {
	case "zero1":
		return 4*p + 4*p + 8*p/n
	case "zero2":
		return 4*p + 4*p/n + 8*p/n
	case "zero3":
		return (4*p + 4*p + 8*p) / n
	}
	return 16 * p
}

// commFormula is the paper's volume per rank and step, in elements (2P, or
// 3P for stage 3), times the ring's (N-1)/N, in bytes.
func commFormula(strategy string, p, n float64) float64 {
	k := 2.0
	if strategy == "zero3" {
		k = 3
	}
	return k * p * 4 * (n - 1) / n
}

func report(runs []run, model string, steps, batch int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%d parameters), Adam, batch %d per rank, %d steps, %s; one process per rank on this 2-core machine (oversubscribed beyond 2). ",
		model, runs[0].NumParams, batch, steps, time.Now().UTC().Format("2006-01-02"))
	b.WriteString("State = parameters + gradients + optimizer state held persistently per rank (the most any rank holds); peak adds what a step holds transiently (stage 2's gradient buckets, stage 3's gathered layers and in-flight gradients). Moved = payload bytes rank 0 moved per step on the training Comm (sent, or read from and written into peers' shared buffers by the zero-copy collectives), and the transport that moved them, next to the paper's 2P (3P for stage 3) elements x 4 bytes x (N-1)/N (stage 3 gathers the first Linear only once: its backward needs no parameters, so it moves that layer's share less).\n\n")
	b.WriteString("| ranks | strategy | state MB | formula MB | state/formula | peak MB | moved MB/step | via | formula MB/step | moved/formula | step ms (p50) |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|\n")
	for _, r := range runs {
		p, n := float64(r.NumParams), float64(r.World)
		st := float64(r.Params + r.Grads + r.Optimizer)
		f := formula(r.Strategy, p, n)
		cf := commFormula(r.Strategy, p, n)
		ratio := "-"
		if cf > 0 {
			ratio = fmt.Sprintf("%.3f", r.CommPerStep/cf)
		}
		fmt.Fprintf(&b, "| %d | %s | %.1f | %.1f | %.3f | %.1f | %.1f | %s | %.1f | %s | %.0f |\n", r.World, r.Strategy, st/1e6, f/1e6, st/f,
			mb(r.Peak), r.CommPerStep/1e6, transports(r.CommBy), cf/1e6, ratio, r.StepMs)
	}
	return b.String()
}

func plots(runs []run, model, prefix string) error {
	for _, what := range []string{"memory", "step"} {
		p := plot.New()
		p.X.Label.Text = "ranks"
		if what == "memory" {
			p.Title.Text = "Model state per rank (Adam, " + model + ")"
			p.Y.Label.Text = "MB held persistently"
		} else {
			p.Title.Text = "Step time (Adam, " + model + ")"
			p.Y.Label.Text = "ms per step (p50)"
		}
		for i, st := range strategies {
			var xy plotter.XYs
			for _, r := range runs {
				if r.Strategy != st {
					continue
				}
				y := r.StepMs
				if what == "memory" {
					y = mb(r.Params + r.Grads + r.Optimizer)
				}
				xy = append(xy, plotter.XY{X: float64(r.World), Y: y})
			}
			sort.Slice(xy, func(a, b int) bool { return xy[a].X < xy[b].X })
			if len(xy) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(xy)
			if err != nil {
				return err
			}
			c := plotutil.Color(i)
			l.Color, pts.Color = c, c
			p.Add(l, pts)
			p.Legend.Add(st, l, pts)
		}
		p.Legend.Top = true
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
		if err := p.Save(6*vg.Inch, 3.5*vg.Inch, prefix+"_"+what+".png"); err != nil {
			return err
		}
	}
	return nil
}
