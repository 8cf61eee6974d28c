package train

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"testing"
)

// TestWriteEventNonFinite: an event with NaN or infinite numbers is still
// one JSON line, with null for them (nested ones too), the same keys as
// encoding/json writes for it with finite values (omitempty honoured),
// and their names returned.
func TestWriteEventNonFinite(t *testing.T) {
	s := Summary{Event: "summary", WorldSize: 2, EvalLoss: math.NaN(), TrainLoss: 1.5, GradNormP50: math.Inf(1),
		Pipeline: &detail{Stages: 2, Bubble: math.Inf(-1), Boundaries: []int{0, 3, 6},
			PerStage: []stageDetail{{Rank: 1, Bubble: math.NaN()}}}}
	var buf bytes.Buffer
	bad, err := writeEvent(&buf, s)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"eval_loss", "grad_norm_p50", "pipeline.bubble", "pipeline.per_stage[0].bubble"}
	if !slices.Equal(bad, want) {
		t.Errorf("non-finite %v, want %v", bad, want)
	}
	if bytes.Count(buf.Bytes(), []byte("\n")) != 1 {
		t.Errorf("not one line: %q", buf.String())
	}
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if v, ok := got["eval_loss"]; !ok || v != nil {
		t.Errorf("eval_loss %v", v)
	}
	if got["train_loss"] != 1.5 || got["pipeline"].(map[string]any)["bubble"] != nil {
		t.Errorf("values: %s", buf.String())
	}
	// Keys as encoding/json writes them for finite values.
	fin := s
	fin.EvalLoss, fin.GradNormP50 = 2, 3
	p := *s.Pipeline.(*detail)
	p.Bubble, p.PerStage = 0.5, []stageDetail{{Rank: 1, Bubble: 0.1}}
	fin.Pipeline = &p
	ref, err := json.Marshal(fin)
	if err != nil {
		t.Fatal(err)
	}
	var refm map[string]any
	json.Unmarshal(ref, &refm)
	if !reflect.DeepEqual(keys(got), keys(refm)) || !reflect.DeepEqual(keys(got["pipeline"].(map[string]any)), keys(refm["pipeline"].(map[string]any))) {
		t.Errorf("keys differ from encoding/json's:\n%s\n%s", buf.String(), ref)
	}
	if nonFiniteFields(fin) != nil {
		t.Errorf("finite summary: %v", nonFiniteFields(fin))
	}
}

// detail is a strategy's section of the summary, shaped like the
// pipeline's (package pp).
type detail struct {
	Stages     int           `json:"stages"`
	Bubble     float64       `json:"bubble"`
	Boundaries []int         `json:"boundaries"`
	PerStage   []stageDetail `json:"per_stage"`
	Ops        []string      `json:"-"`
}

type stageDetail struct {
	Rank   int     `json:"rank"`
	Bubble float64 `json:"bubble"`
}

func (d *detail) Text() string { return "" }

func keys(m map[string]any) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	slices.Sort(k)
	return k
}
