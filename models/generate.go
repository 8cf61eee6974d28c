package models

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Generate continues prompt by n bytes with a byte-level language model
// (gpt): each next byte is drawn from the softmax of the model's logits
// at temperature (0: the most likely byte), with a generator seeded by
// seed, so the same call gives the same text. The model sees the last
// Context bytes; a shorter text starts at position 0 (attention is
// causal, so what fills the rest of the window does not matter).
func Generate(m *Model, prompt []byte, n int, temperature float64, seed uint64) ([]byte, error) {
	ctx := m.InputSize()
	if m.LabelsPerSample() != ctx || m.Classes() != Vocab {
		return nil, fmt.Errorf("models: %s is not a byte-level language model (%d inputs, %d labels per sample, %d classes)", m.Name, ctx, m.LabelsPerSample(), m.Classes())
	}
	if n < 0 || temperature < 0 || math.IsNaN(temperature) {
		return nil, fmt.Errorf("models: generate %d bytes at temperature %v", n, temperature)
	}
	gr, err := m.NewGraph(1, false)
	if err != nil {
		return nil, err
	}
	defer gr.Close()
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	text := append([]byte(nil), prompt...)
	x := make([]float32, ctx)
	p := make([]float64, Vocab)
	for k := 0; k < n; k++ {
		w := text[max(0, len(text)-ctx):]
		if len(w) == 0 {
			w = []byte{'\n'}
			text = append(text, '\n')
		}
		clear(x)
		for i, b := range w {
			x[i] = float32(b)
		}
		logits, err := gr.Logits(x)
		if err != nil {
			return nil, err
		}
		row := logits[(len(w)-1)*Vocab : len(w)*Vocab]
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		if temperature == 0 {
			text = append(text, byte(best))
			continue
		}
		var sum float64
		for i, v := range row {
			p[i] = math.Exp((float64(v) - float64(row[best])) / temperature)
			sum += p[i]
		}
		u := r.Float64() * sum
		next := Vocab - 1
		for i, v := range p {
			if u < v {
				next = i
				break
			}
			u -= v
		}
		text = append(text, byte(next))
	}
	return text[len(text)-n:], nil
}
