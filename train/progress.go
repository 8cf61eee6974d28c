package train

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// bar draws a one-line progress bar (carriage-return updates), at most ten
// times a second.
type bar struct {
	w     io.Writer
	last  time.Time
	shown bool
	unit  string // what the rate counts: "samples", or "tokens" for text
}

func newBar(w io.Writer) *bar { return &bar{w: w, unit: "samples"} }

// update shows k of n done (what: "epoch 1/2" for the batches of an
// epoch, "step" for the steps of a run).
func (b *bar) update(what string, k, n int, rate, loss, eta float64) {
	if b.w == nil {
		return
	}
	if k < n && time.Since(b.last) < 100*time.Millisecond {
		return
	}
	b.last = time.Now()
	const width = 30
	fill := width * k / max(n, 1)
	fmt.Fprintf(b.w, "\r%s [%s%s] %d/%d  %6.0f %s/s  loss %.4f  ETA %s ",
		what, strings.Repeat("=", fill), strings.Repeat(" ", width-fill), k, n, rate, b.unit, loss, fmtDur(eta))
	b.shown = true
}

func (b *bar) done() {
	if b.w != nil && b.shown {
		fmt.Fprintln(b.w)
		b.shown = false
	}
}

func fmtDur(s float64) string {
	if s < 0 || s > 1e7 {
		s = 0
	}
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}
