// Command pipebench measures pipeline parallelism: for both schedules and
// several micro-batch counts M it runs `train -strategy pipeline` and
// records the measured bubble (idle / (busy + idle), mean over stages) next
// to (K-1)/(M+K-1), the throughput, and the peak activation bytes a stage
// held (GPipe vs 1F1B). It rewrites the pipebench section of
// benchmarks/README.md and writes benchmarks/pipe_results.json and
// benchmarks/pipe_bubble.png.
//
//	go run ./benchmarks/pipebench -stages 2 -micro 2,4,8,16
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

type run struct {
	Schedule      string  `json:"schedule"`
	Stages        int     `json:"stages"`
	Micro         int     `json:"micro"`
	Bubble        float64 `json:"bubble"`
	Theory        float64 `json:"bubble_theory"`
	SamplesPerSec float64 `json:"samples_per_sec"`
	PeakBytes     int64   `json:"peak_activation_bytes"` // stage 0
	PeakHeld      int     `json:"peak_held"`             // stage 0
}

func main() {
	stages := flag.Int("stages", 2, "pipeline stages (= ranks)")
	micro := flag.String("micro", "2,4,8,16", "micro-batch counts")
	model := flag.String("model", "mlp", "model")
	batch := flag.Int("batch", 64, "batch")
	limit := flag.Int("limit", 12800, "training samples (one epoch)")
	readme := flag.String("readme", "benchmarks/README.md", "file whose pipebench section is rewritten")
	flag.Parse()
	bin := filepath.Join(os.TempDir(), "gdist-pipebench-train")
	if o, err := exec.Command("go", "build", "-o", bin, "./cmd/train").CombinedOutput(); err != nil {
		fail("building train: %v\n%s", err, o)
	}
	var runs []run
	for _, ms := range strings.Split(*micro, ",") {
		m, _ := strconv.Atoi(ms)
		for _, sch := range []string{"gpipe", "1f1b"} {
			cmd := exec.Command(bin, "-nproc", strconv.Itoa(*stages), "-strategy", "pipeline", "-schedule", sch,
				"-microbatches", ms, "-model", *model, "-batch", strconv.Itoa(*batch), "-limit", strconv.Itoa(*limit),
				"-epochs", "1", "-json", "-progress=false")
			cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS=1")
			var o, e bytes.Buffer
			cmd.Stdout, cmd.Stderr = &o, &e
			if err := cmd.Run(); err != nil {
				fail("%s M=%d: %v\n%s", sch, m, err, e.String())
			}
			lines := strings.Split(strings.TrimSpace(o.String()), "\n")
			var s struct {
				SamplesPerSec float64 `json:"samples_per_sec"`
				Pipeline      struct {
					Bubble       float64 `json:"bubble"`
					BubbleTheory float64 `json:"bubble_theory"`
					PerStage     []struct {
						Stage         int   `json:"stage"`
						PeakHeld      int   `json:"peak_held_microbatches"`
						PeakHeldBytes int64 `json:"peak_activation_bytes"`
					} `json:"per_stage"`
				} `json:"pipeline"`
			}
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
				fail("bad summary: %v", err)
			}
			r := run{Schedule: sch, Stages: *stages, Micro: m, Bubble: s.Pipeline.Bubble, Theory: s.Pipeline.BubbleTheory, SamplesPerSec: s.SamplesPerSec}
			for _, st := range s.Pipeline.PerStage {
				if st.Stage == 0 {
					r.PeakBytes, r.PeakHeld = st.PeakHeldBytes, st.PeakHeld
				}
			}
			fmt.Fprintf(os.Stderr, "%-5s M=%2d: bubble %.3f (theory %.3f), %6.0f samples/s, stage 0 holds %d inputs (%d bytes)\n",
				sch, m, r.Bubble, r.Theory, r.SamplesPerSec, r.PeakHeld, r.PeakBytes)
			runs = append(runs, r)
		}
	}
	b, _ := json.MarshalIndent(runs, "", " ")
	if err := os.WriteFile("benchmarks/pipe_results.json", b, 0o644); err != nil {
		fail("%v", err)
	}
	var t strings.Builder
	fmt.Fprintf(&t, "%s, %d stages on %d ranks, batch %d, one epoch of %d samples, SGD, %s. Bubble = idle / (busy + idle) per stage, mean over stages; idle is time waiting for activations, gradients and the end-of-step transfers.\n\n",
		*model, *stages, *stages, *batch, *limit, time.Now().UTC().Format("2006-01-02"))
	t.WriteString("| schedule | M | bubble | (K-1)/(M+K-1) | samples/s | stage 0 peak inputs held | stage 0 peak activation bytes |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range runs {
		fmt.Fprintf(&t, "| %s | %d | %.3f | %.3f | %.0f | %d | %d |\n", r.Schedule, r.Micro, r.Bubble, r.Theory, r.SamplesPerSec, r.PeakHeld, r.PeakBytes)
	}
	fmt.Println(t.String())
	if err := plotBubble(runs, "benchmarks/pipe_bubble.png"); err != nil {
		fail("plot: %v", err)
	}
	if err := rewrite(*readme, t.String()); err != nil {
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

func rewrite(path, table string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	const begin, end = "<!-- pipebench:begin -->", "<!-- pipebench:end -->"
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s ... %s section", path, begin, end)
	}
	return os.WriteFile(path, []byte(s[:i+len(begin)]+"\n"+table+"\n"+s[j:]), 0o644)
}
