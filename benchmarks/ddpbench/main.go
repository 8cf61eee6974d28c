// Command ddpbench measures DDP training throughput side by side with
// PyTorch DDP (Gloo): for each model, world size and overlap setting it runs
// gdist's train and the PyTorch peer (benchmarks/peers/torch_ddp.py) in
// turn, repeats the whole sweep -reps times (interleaved, so machine noise
// hits both alike), and reports medians: a markdown table written between
// the ddpbench markers of benchmarks/NOTES.md, a JSON file of every run
// (benchmarks/results/ddp_results.json), and a PNG plot of samples/s
// against world size per model (benchmarks/results/ddp_scaling_<model>.png).
//
//	go run ./benchmarks/ddpbench -models mlp,cnn -worlds 1,2,4 -reps 3
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
	Impl          string  `json:"impl"` // gdist | gdist-no-overlap | torch
	Model         string  `json:"model"`
	World         int     `json:"world"`
	Rep           int     `json:"rep"`
	SamplesPerSec float64 `json:"samples_per_sec"`
	StepMsP50     float64 `json:"step_ms_p50"`
	TestAccuracy  float64 `json:"test_accuracy"`
	SyncBNMs      float64 `json:"syncbn_ms_per_step,omitempty"`
}

func main() {
	models := flag.String("models", "mlp,cnn", "models to run")
	worlds := flag.String("worlds", "1,2,4", "world sizes")
	reps := flag.Int("reps", 3, "repetitions of the whole sweep")
	limits := flag.String("limit", "mlp=60000,cnn=6400,cnn-bn=6400", "training samples per model (one epoch)")
	batch := flag.Int("batch", 64, "batch per rank")
	torchPeer := flag.String("torch", "benchmarks/peers/torch_ddp.py", "PyTorch peer script (empty: skip)")
	torchModels := flag.String("torch-models", "mlp,cnn", "models to run the PyTorch peer on")
	readmePath := flag.String("readme", "benchmarks/NOTES.md", "file whose ddpbench section is rewritten")
	png := flag.String("png", "benchmarks/results/ddp_scaling_%s.png", "plot output, one per model (%s: the model)")
	impls := flag.String("impls", "gdist,gdist-no-overlap,torch", "what to run: gdist, gdist-no-overlap, gdist-syncbn, torch")
	section := flag.String("section", "ddpbench", "README section to rewrite: <!-- NAME:begin --> ... <!-- NAME:end -->")
	replot := flag.String("replot", "", "skip the runs: rebuild table and plots from this JSON file of an earlier sweep")
	jsonOut := flag.String("out", "benchmarks/results/ddp_results.json", "every run as JSON")
	flag.Parse()

	if *replot != "" {
		b, err := os.ReadFile(*replot)
		if err != nil {
			fail("%v", err)
		}
		var runs []run
		if err := json.Unmarshal(b, &runs); err != nil {
			fail("%s: %v", *replot, err)
		}
		reps := 0
		for _, r := range runs {
			reps = max(reps, r.Rep)
		}
		finish(runs, *models, *worlds, *batch, parseLimits(*limits), reps, *png, *readmePath, *section)
		return
	}
	ctx := context.Background()
	// train goes into a directory of this run's own: a fixed name in the
	// shared temp directory let two benchmarks started together run each
	// other's build.
	dir, err := os.MkdirTemp("", "gdist-ddpbench-")
	if err != nil {
		fail("%v", err)
	}
	tmpDir = dir
	bin := filepath.Join(dir, "train")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/train").CombinedOutput(); err != nil {
		fail("building train: %v\n%s", err, out)
	}
	lim := parseLimits(*limits)
	torchOn := map[string]bool{}
	for _, m := range strings.Split(*torchModels, ",") {
		torchOn[m] = *torchPeer != ""
	}
	var runs []run
	for rep := 1; rep <= *reps; rep++ {
		for _, m := range strings.Split(*models, ",") {
			for _, ws := range strings.Split(*worlds, ",") {
				w, _ := strconv.Atoi(ws)
				for _, impl := range strings.Split(*impls, ",") {
					if impl == "torch" && !torchOn[m] {
						continue
					}
					r, err := once(ctx, bin, *torchPeer, impl, m, w, *batch, lim[m])
					if err != nil {
						fail("%s %s world %d: %v", impl, m, w, err)
					}
					r.Rep = rep
					fmt.Fprintf(os.Stderr, "rep %d %-17s %-6s world %d: %8.0f samples/s  step p50 %6.2f ms  acc %.4f\n",
						rep, impl, m, w, r.SamplesPerSec, r.StepMsP50, r.TestAccuracy)
					runs = append(runs, r)
				}
			}
		}
	}
	os.RemoveAll(dir)
	tmpDir = ""
	b, _ := json.MarshalIndent(runs, "", " ")
	if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
		fail("%v", err)
	}
	finish(runs, *models, *worlds, *batch, lim, *reps, *png, *readmePath, *section)
}

func parseLimits(s string) map[string]string {
	lim := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		lim[k] = v
	}
	return lim
}

func finish(runs []run, models, worlds string, batch int, lim map[string]string, reps int, png, readmePath, section string) {
	table := report(runs, models, worlds, batch, lim, reps)
	if section == "syncbn" {
		table = syncReport(runs, models, worlds, batch, lim, reps)
		png = ""
	}
	fmt.Println(table)
	for _, m := range strings.Split(models, ",") {
		if png == "" {
			break
		}
		var mine []run
		for _, r := range runs {
			if r.Model == m {
				mine = append(mine, r)
			}
		}
		if err := plotRuns(mine, m, fmt.Sprintf(png, m)); err != nil {
			fail("plot: %v", err)
		}
	}
	if err := readme.Rewrite(readmePath, section, table); err != nil {
		fail("%v", err)
	}
}

// syncReport: the cost of SyncBatchNorm over per-rank batch norm.
func syncReport(runs []run, models, worlds string, batch int, lim map[string]string, reps int) string {
	sps, ms := medians(runs)
	inSync := map[key][]float64{}
	for _, r := range runs {
		if r.Impl == "gdist-syncbn" {
			k := key{r.Impl, r.Model, r.World}
			inSync[k] = append(inSync[k], r.SyncBNMs)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Medians of %d interleaved runs, one epoch each, batch %d per rank, SGD, OPENBLAS_NUM_THREADS=1; %s. ", reps, batch, time.Now().UTC().Format("2006-01-02"))
	b.WriteString("\"In SyncBN collectives\" is rank 0's time blocked in SyncBN's all-gathers and all-reduces per step (waiting for the slower rank included): the direct cost, immune to the run-to-run noise of whole-step times on this shared machine.\n\n")
	b.WriteString("| model | ranks | BN step ms (p50) | SyncBN step ms (p50) | step-time ratio | in SyncBN collectives, ms/step | as share of SyncBN step | BN samples/s | SyncBN samples/s |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range strings.Split(models, ",") {
		for _, ws := range strings.Split(worlds, ",") {
			w, _ := strconv.Atoi(ws)
			p, q := key{"gdist", m, w}, key{"gdist-syncbn", m, w}
			sy := median(inSync[q])
			fmt.Fprintf(&b, "| %s (limit %s) | %d | %.2f | %.2f | %.2f | %.2f | %.1f%% | %.0f | %.0f |\n", m, lim[m], w, ms[p], ms[q], ms[q]/ms[p], sy, sy/ms[q]*100, sps[p], sps[q])
		}
	}
	return b.String()
}

// tmpDir holds the train binary while the runs go on (fail removes it).
var tmpDir string

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ddpbench: "+format+"\n", args...)
	if tmpDir != "" {
		os.RemoveAll(tmpDir)
	}
	os.Exit(1)
}

func once(ctx context.Context, bin, peer, impl, model string, world, batch int, limit string) (run, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	var cmd *exec.Cmd
	if impl == "torch" {
		cmd = exec.CommandContext(ctx, "/usr/bin/python3", peer, "--world", strconv.Itoa(world), "--model", model,
			"--epochs", "1", "--batch", strconv.Itoa(batch), "--limit", limit)
	} else {
		args := []string{"-nproc", strconv.Itoa(world), "-model", model, "-epochs", "1", "-batch", strconv.Itoa(batch),
			"-limit", limit, "-json", "-progress=false"}
		switch impl {
		case "gdist-no-overlap":
			args = append(args, "-no-overlap")
		case "gdist-syncbn":
			args = append(args, "-syncbn")
		}
		cmd = exec.CommandContext(ctx, bin, args...)
	}
	cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return run{}, fmt.Errorf("%v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var v struct {
		SamplesPerSec float64 `json:"samples_per_sec"`
		StepMsP50     float64 `json:"step_ms_p50"`
		TestAccuracy  float64 `json:"test_accuracy"`
		SyncBNMs      float64 `json:"syncbn_ms_per_step"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &v); err != nil {
		return run{}, fmt.Errorf("bad output %q: %v", lines[len(lines)-1], err)
	}
	return run{Impl: impl, Model: model, World: world, SamplesPerSec: v.SamplesPerSec, StepMsP50: v.StepMsP50, TestAccuracy: v.TestAccuracy, SyncBNMs: v.SyncBNMs}, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

type key struct {
	impl, model string
	world       int
}

func medians(runs []run) (map[key]float64, map[key]float64) {
	sps, ms := map[key][]float64{}, map[key][]float64{}
	for _, r := range runs {
		k := key{r.Impl, r.Model, r.World}
		sps[k] = append(sps[k], r.SamplesPerSec)
		ms[k] = append(ms[k], r.StepMsP50)
	}
	a, b := map[key]float64{}, map[key]float64{}
	for k, v := range sps {
		a[k] = median(v)
		b[k] = median(ms[k])
	}
	return a, b
}

func report(runs []run, models, worlds string, batch int, lim map[string]string, reps int) string {
	sps, ms := medians(runs)
	var b strings.Builder
	fmt.Fprintf(&b, "Medians of %d interleaved runs, one epoch each, batch %d per rank, SGD (momentum 0.9), OPENBLAS_NUM_THREADS=1; ", reps, batch)
	fmt.Fprintf(&b, "%s. Scaling efficiency = samples/s at N ranks / (N x samples/s at 1 rank); this machine has 2 cores, so 4 ranks oversubscribe it.\n\n", time.Now().UTC().Format("2006-01-02"))
	b.WriteString("| model | ranks | gdist samples/s | gdist step ms | no-overlap samples/s | overlap gain | PyTorch DDP samples/s | gdist / PyTorch | gdist scaling eff. |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range strings.Split(models, ",") {
		base := sps[key{"gdist", m, 1}]
		for _, ws := range strings.Split(worlds, ",") {
			w, _ := strconv.Atoi(ws)
			g, gn, tq := sps[key{"gdist", m, w}], sps[key{"gdist-no-overlap", m, w}], sps[key{"torch", m, w}]
			torch, ratio := "-", "-"
			if tq > 0 {
				torch = fmt.Sprintf("%.0f", tq)
				ratio = fmt.Sprintf("%.2f", g/tq)
			}
			eff := "-"
			if base > 0 {
				eff = fmt.Sprintf("%.2f", g/(float64(w)*base))
			}
			noOverlap, gain := "-", "-"
			if gn > 0 {
				noOverlap, gain = fmt.Sprintf("%.0f", gn), fmt.Sprintf("%.2f", g/gn)
			}
			fmt.Fprintf(&b, "| %s (limit %s) | %d | %.0f | %.2f | %s | %s | %s | %s | %s |\n", m, lim[m], w, g, ms[key{"gdist", m, w}], noOverlap, gain, torch, ratio, eff)
		}
	}
	return b.String()
}

func plotRuns(runs []run, model, path string) error {
	sps, _ := medians(runs)
	p := plot.New()
	p.Title.Text = "DDP training throughput, " + model + " (medians)"
	p.X.Label.Text = "ranks"
	p.Y.Label.Text = "samples/s"
	series := map[string]plotter.XYs{}
	var names []string
	for k, v := range sps {
		name := k.impl
		if _, ok := series[name]; !ok {
			names = append(names, name)
		}
		series[name] = append(series[name], plotter.XY{X: float64(k.world), Y: v})
	}
	sort.Strings(names)
	for i, name := range names {
		xy := series[name]
		sort.Slice(xy, func(a, b int) bool { return xy[a].X < xy[b].X })
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return err
		}
		c := plotutil.Color(i)
		l.Color, pts.Color = c, c
		if strings.HasPrefix(name, "torch") {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l, pts)
		p.Legend.Add(name, l, pts)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	return p.Save(6*vg.Inch, 3.5*vg.Inch, path)
}
