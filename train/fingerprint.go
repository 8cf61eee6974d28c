package train

// The ranks of one run must agree on its configuration: a rank of another
// job that joined on the same port, or a node started with other flags,
// would otherwise train (or hang) with the others and end with a result
// that is no honest run's. Run's first collective exchanges every rank's
// settings (Config.Settings, plus the data set sizes and the checkpoint it
// resumes from) and refuses a mismatch on every rank, naming the settings
// and both ranks. Fingerprint condenses the same settings into a job id
// (cmd/train gives it to the rendezvous of a job with no token and no job
// id of its own, so another job's rank is refused at the door).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/gdist/gdist/comm"
)

// Settings lists, as "-flag value" pairs in a fixed order, what every rank
// of a run must agree on: the model, the data, the seed, the optimizer and
// its learning rate, the batch, the run's length and schedule, the
// strategy and its options (the flags of Config.Options, by name), and
// whether and how often it saves (not the paths, which may differ from
// host to host, and not the per-host settings: Config.LocalRanks, BLAS
// threads).
func (c *Config) Settings() []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	b := strconv.FormatBool
	i := strconv.Itoa
	data := c.DataDir
	if data == "" {
		data = "(default)"
	}
	save := "(none)"
	if c.Save != "" {
		save = "(set)"
	}
	out := []string{
		"-model " + c.Model,
		"-data " + data,
		"-limit " + i(c.Limit),
		"-pad " + b(c.Pad),
		"-seed " + strconv.FormatInt(c.Seed, 10),
		"-optimizer " + c.Optimizer,
		"-lr " + f(c.LR),
		"-momentum " + f(c.Momentum),
		"-weight-decay " + f(c.WeightDecay),
		"-batch " + i(c.Batch),
		"-eval-batch " + i(c.EvalBatch),
		"-epochs " + i(c.Epochs),
		"-steps " + strconv.FormatInt(c.Steps, 10),
		"-max-steps " + i(c.MaxSteps),
		"-warmup " + i(c.Warmup),
		"-lr-schedule " + c.LRSchedule,
		"-clip-grad " + f(c.ClipGrad),
		"-eval-every " + i(c.EvalEvery),
		"-strategy " + c.Strategy,
	}
	out = append(out, optionSettings(c.Options)...)
	if c.Device != "" && c.Device != "cpu" {
		out = append(out, "-device "+c.Device)
	}
	if c.Precision != "" && c.Precision != "fp32" {
		out = append(out, "-precision "+c.Precision)
	}
	return append(out,
		"-syncbn "+b(c.SyncBN),
		"-save "+save,
		"-save-every "+i(c.SaveEvery),
		"-sync-save "+b(c.SyncSave),
	)
}

// Fingerprint is a short hash of Settings (after the defaults Validate
// fills in): the same for every rank of one run, and, but for a hash
// collision, different for runs that differ in any of them.
func (c *Config) Fingerprint() string {
	cp := *c
	cp.defaults()
	h := sha256.Sum256([]byte(strings.Join(cp.Settings(), "\n")))
	return hex.EncodeToString(h[:8])
}

// checkSameConfig is Run's first collective: every rank sends its
// settings (plus extra: what it found on disk, the data's size and the
// checkpoint it resumes from), and every rank returns the same ErrConfig
// if any rank's differ from rank 0's, naming the settings and the ranks.
func checkSameConfig(ctx context.Context, c comm.Comm, cfg *Config, extra ...string) error {
	mine := append(cfg.Settings(), extra...)
	all, err := comm.AllGatherObject(ctx, c, mine)
	if err != nil {
		return fmt.Errorf("train: comparing the ranks' settings: %w", err)
	}
	var diffs []string
	ranks := 0
	for r := 1; r < len(all); r++ {
		d := settingDiffs(all[0], all[r], r)
		if len(d) == 0 {
			continue
		}
		ranks++
		if ranks <= 3 {
			diffs = append(diffs, d...)
		}
	}
	if ranks == 0 {
		return nil
	}
	more := ""
	if ranks > 3 {
		more = fmt.Sprintf(" (and %d more ranks differ)", ranks-3)
	}
	return fmt.Errorf("%w: the ranks disagree: %s%s. Every rank of a run needs the same settings: start them with the same flags; "+
		"if these are two jobs on one MASTER_PORT, give each its own port, or its own GDIST_TOKEN or GDIST_JOB_ID", ErrConfig, strings.Join(diffs, "; "), more)
}

// settingDiffs lists how rank r's settings (b) differ from rank 0's (a).
func settingDiffs(a, b []string, r int) []string {
	key := func(s string) string { k, _, _ := strings.Cut(s, " "); return k }
	val := func(s string) string { _, v, _ := strings.Cut(s, " "); return v }
	var out []string
	for i := 0; i < max(len(a), len(b)); i++ {
		switch {
		case i >= len(a):
			out = append(out, fmt.Sprintf("rank %d has %s, rank 0 nothing", r, b[i]))
		case i >= len(b):
			out = append(out, fmt.Sprintf("rank 0 has %s, rank %d nothing", a[i], r))
		case a[i] != b[i]:
			if key(a[i]) == key(b[i]) {
				out = append(out, fmt.Sprintf("rank %d has %s %s, rank 0 has %s %s", r, key(b[i]), val(b[i]), key(a[i]), val(a[i])))
			} else {
				out = append(out, fmt.Sprintf("rank %d has %s, rank 0 has %s", r, b[i], a[i]))
			}
		}
	}
	return out
}
