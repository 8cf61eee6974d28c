// Command pipebench measures pipeline parallelism: for both schedules and
// several micro-batch counts M it runs `train -strategy pipeline` and
// records the measured bubble (idle / (busy + idle), mean over stages) next
// to (K-1)/(M+K-1), the throughput, and the peak activation bytes a stage
// held (GPipe vs 1F1B). It rewrites the pipebench section of
// benchmarks/NOTES.md and writes benchmarks/results/pipe_results.json and
// benchmarks/results/pipe_bubble.png.
//
// Each configuration runs -reps times, interleaved (all configurations
// once, then again), and the table reports the median run by bubble. The
// default model, mlp-deep, has seven equal hidden layers so that -balance
// time can give the stages near-equal compute: the bubble formula assumes
// balanced stages. Next to the measured bubble it reports the bubble that
// pipeline.Replay computes for the same schedule with instant messages,
// from the measured op times and from their means, which separates what
// stage imbalance, compute jitter and communication each add. The default
// batch, 4096, keeps micro-batches at 256 rows or more up to M = 16: on a
// shared machine short ops jitter more, in relative terms, than long ones.
//
//	go run ./benchmarks/pipebench -stages 2 -micro 2,4,8,16
//
// A gpt model trains -steps steps on the default text corpus (-warmup 0,
// the final evaluation at batch 8) into its own section and files:
//
//	go run ./benchmarks/pipebench -model gpt-large -batch 32 -steps 8 -micro 2,4,8 \
//	    -section pipebench-gpt -out benchmarks/results/pipe_gpt_results.json -png benchmarks/results/pipe_gpt_bubble.png
package main

import (
	"bytes"
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
	Schedule      string    `json:"schedule"`
	Stages        int       `json:"stages"`
	Micro         int       `json:"micro"`
	Bubble        float64   `json:"bubble"`
	Theory        float64   `json:"bubble_theory"`
	Replay        float64   `json:"bubble_replay"`      // instant messages, measured op times
	ReplayMean    float64   `json:"bubble_replay_mean"` // instant messages, mean op times
	SamplesPerSec float64   `json:"samples_per_sec"`
	PeakBytes     int64     `json:"peak_activation_bytes"` // stage 0
	PeakHeld      int       `json:"peak_held"`             // stage 0
	Boundaries    []int     `json:"boundaries"`
	BusyMs        []float64 `json:"busy_ms_per_step"` // per stage
	Runs          []float64 `json:"bubble_runs"`      // every repetition's bubble
}

func main() {
	stages := flag.Int("stages", 2, "pipeline stages (= ranks)")
	micro := flag.String("micro", "2,4,8,16", "micro-batch counts")
	model := flag.String("model", "mlp-deep", "model")
	batch := flag.Int("batch", 4096, "batch")
	limit := flag.Int("limit", 24576, "training samples (one epoch)")
	balance := flag.String("balance", "time", "stage balance: params or time")
	reps := flag.Int("reps", 3, "runs of each configuration (median reported)")
	steps := flag.Int("steps", 0, "training steps per run (0: one epoch of -limit samples); text models need it")
	readmePath := flag.String("readme", "benchmarks/NOTES.md", "file whose section is rewritten")
	section := flag.String("section", "pipebench", "README section to rewrite: <!-- NAME:begin --> ... <!-- NAME:end -->")
	out := flag.String("out", "benchmarks/results/pipe_results.json", "runs as JSON")
	png := flag.String("png", "benchmarks/results/pipe_bubble.png", "bubble plot")
	flag.Parse()
	bin := filepath.Join(os.TempDir(), "gdist-pipebench-train")
	if o, err := exec.Command("go", "build", "-o", bin, "./cmd/train").CombinedOutput(); err != nil {
		fail("building train: %v\n%s", err, o)
	}
	type key struct {
		sch string
		m   int
	}
	var order []key
	for _, ms := range strings.Split(*micro, ",") {
		m, err := strconv.Atoi(ms)
		if err != nil || m < 1 {
			fail("bad -micro %q", ms)
		}
		for _, sch := range []string{"gpipe", "1f1b"} {
			order = append(order, key{sch, m})
		}
	}
	all := map[key][]run{}
	for rep := 0; rep < *reps; rep++ {
		for _, k := range order {
			r := once(bin, k.sch, k.m, *stages, *model, *batch, *limit, *steps, *balance)
			fmt.Fprintf(os.Stderr, "rep %d %-5s M=%2d: bubble %.3f (theory %.3f, replayed %.3f, with mean op times %.3f), %6.0f samples/s, stages %v busy %v ms/step, stage 0 holds %d inputs (%d bytes)\n",
				rep, k.sch, k.m, r.Bubble, r.Theory, r.Replay, r.ReplayMean, r.SamplesPerSec, r.Boundaries, r.BusyMs, r.PeakHeld, r.PeakBytes)
			all[k] = append(all[k], r)
		}
	}
	var runs []run
	for _, k := range order {
		rs := all[k]
		sort.Slice(rs, func(i, j int) bool { return rs[i].Bubble < rs[j].Bubble })
		med := rs[len(rs)/2]
		for _, r := range rs {
			med.Runs = append(med.Runs, r.Bubble)
		}
		runs = append(runs, med)
	}
	b, _ := json.MarshalIndent(runs, "", " ")
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fail("%v", err)
	}
	var t strings.Builder
	length := fmt.Sprintf("one epoch of %d samples, SGD", *limit)
	if *steps > 0 {
		length = fmt.Sprintf("%d steps, the model's default optimizer", *steps)
	}
	fmt.Fprintf(&t, "%s, %d stages on %d ranks (auto: shared memory), -balance %s, batch %d, %s, %s; median of %d interleaved runs. Bubble = idle / (busy + idle) per stage, mean over stages; idle is time waiting for activations, gradients and the end-of-step transfers.\n\n",
		*model, *stages, *stages, *balance, *batch, length, time.Now().UTC().Format("2006-01-02"), *reps)
	t.WriteString("Replayed: the same schedule on paper with instant messages (pipeline.Replay), from each op's measured compute time in every step (imbalance + compute jitter) and from each op's mean time (imbalance only).\n\n")
	t.WriteString("| schedule | M | bubble | (K-1)/(M+K-1) | bubble / theory | replayed, op times | replayed, mean op times | all runs | samples/s | stages | busy ms/step per stage | stage 0 peak inputs held | stage 0 peak activation bytes |\n|---|---:|---:|---:|---:|---:|---:|---|---:|---|---|---:|---:|\n")
	for _, r := range runs {
		var rs []string
		for _, b := range r.Runs {
			rs = append(rs, fmt.Sprintf("%.3f", b))
		}
		var bs []string
		for _, b := range r.BusyMs {
			bs = append(bs, fmt.Sprintf("%.0f", b))
		}
		fmt.Fprintf(&t, "| %s | %d | %.3f | %.3f | %.2f | %.3f | %.3f | %s | %.0f | %v | %s | %d | %d |\n", r.Schedule, r.Micro, r.Bubble, r.Theory, r.Bubble/r.Theory,
			r.Replay, r.ReplayMean, strings.Join(rs, " "), r.SamplesPerSec, r.Boundaries, strings.Join(bs, " / "), r.PeakHeld, r.PeakBytes)
	}
	fmt.Println(t.String())
	if err := plotBubble(runs, *png); err != nil {
		fail("plot: %v", err)
	}
	if err := readme.Rewrite(*readmePath, *section, t.String()); err != nil {
		fail("%v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pipebench: "+format+"\n", args...)
	os.Exit(1)
}

func plotBubble(runs []run, path string) error {
	p := plot.New()
	p.Title.Text = "Pipeline bubble against micro-batches"
	p.X.Label.Text = "micro-batches M"
	p.Y.Label.Text = "bubble fraction"
	series := map[string]plotter.XYs{}
	for _, r := range runs {
		series[r.Schedule] = append(series[r.Schedule], plotter.XY{X: float64(r.Micro), Y: r.Bubble})
		if r.Schedule == "gpipe" {
			series["(K-1)/(M+K-1)"] = append(series["(K-1)/(M+K-1)"], plotter.XY{X: float64(r.Micro), Y: r.Theory})
		}
	}
	for i, name := range []string{"gpipe", "1f1b", "(K-1)/(M+K-1)"} {
		l, pts, err := plotter.NewLinePoints(series[name])
		if err != nil {
			return err
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		if i == 2 {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l, pts)
		p.Legend.Add(name, l, pts)
	}
	p.Legend.Top = true
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	return p.Save(6*vg.Inch, 3.5*vg.Inch, path)
}

// once runs one training job and returns its measurements.
func once(bin, sch string, m, stages int, model string, batch, limit, steps int, balance string) run {
	args := []string{"-nproc", strconv.Itoa(stages), "-backend", "auto", "-strategy", "pipeline", "-schedule", sch,
		"-microbatches", strconv.Itoa(m), "-model", model, "-batch", strconv.Itoa(batch),
		"-balance", balance, "-json", "-progress=false"}
	if steps > 0 {
		args = append(args, "-max-steps", strconv.Itoa(steps), "-warmup", "0", "-eval-batch", "8")
	} else {
		args = append(args, "-limit", strconv.Itoa(limit), "-epochs", "1")
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		fail("%s M=%d: %v\n%s", sch, m, err, e.String())
	}
	lines := strings.Split(strings.TrimSpace(o.String()), "\n")
	var s struct {
		Steps         int     `json:"steps"`
		SamplesPerSec float64 `json:"samples_per_sec"`
		Pipeline      struct {
			Bubble       float64 `json:"bubble"`
			BubbleTheory float64 `json:"bubble_theory"`
			Replay       float64 `json:"bubble_replay"`
			ReplayMean   float64 `json:"bubble_replay_mean"`
			Boundaries   []int   `json:"boundaries"`
			PerStage     []struct {
				Stage         int     `json:"stage"`
				BusyMs        float64 `json:"busy_ms"`
				PeakHeld      int     `json:"peak_held_microbatches"`
				PeakHeldBytes int64   `json:"peak_activation_bytes"`
			} `json:"per_stage"`
		} `json:"pipeline"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		fail("bad summary: %v", err)
	}
	r := run{Schedule: sch, Stages: stages, Micro: m, Bubble: s.Pipeline.Bubble, Theory: s.Pipeline.BubbleTheory, Replay: s.Pipeline.Replay, ReplayMean: s.Pipeline.ReplayMean,
		SamplesPerSec: s.SamplesPerSec, Boundaries: s.Pipeline.Boundaries}
	r.BusyMs = make([]float64, stages)
	for _, st := range s.Pipeline.PerStage {
		if st.Stage == 0 {
			r.PeakBytes, r.PeakHeld = st.PeakHeldBytes, st.PeakHeld
		}
		if st.Stage < stages && s.Steps > 0 {
			r.BusyMs[st.Stage] = st.BusyMs / float64(s.Steps)
		}
	}
	return r
}
