package pipeline

import (
	"fmt"

	"github.com/gdist/gdist/models"
)

// Balance splits m's layers into k non-empty contiguous stages and returns
// the k+1 boundaries (0 = b[0] < b[1] < ... < b[k] = m.NumLayers()). It
// minimises the largest stage's parameter count; among splits that tie, it
// takes the one with the smallest sum of squared stage counts (the most
// even), then the first found.
func Balance(m *models.Model, k int) ([]int, error) {
	n := m.NumLayers()
	if k < 1 || k > n {
		return nil, fmt.Errorf("pipeline: cannot split %d layers into %d stages", n, k)
	}
	pre := make([]float64, n+1) // prefix sums of parameter counts
	for i := 0; i < n; i++ {
		_, _, s := m.LayerParamRange(i)
		pre[i+1] = pre[i] + float64(s)
	}
	best := []int(nil)
	bestMax, bestSq := 0.0, 0.0
	cur := make([]int, k+1)
	cur[k] = n
	var rec func(j, from int)
	rec = func(j, from int) {
		if j == k {
			var mx, sq float64
			for s := 0; s < k; s++ {
				c := pre[cur[s+1]] - pre[cur[s]]
				mx = max(mx, c)
				sq += c * c
			}
			if best == nil || mx < bestMax || (mx == bestMax && sq < bestSq) {
				best = append([]int(nil), cur...)
				bestMax, bestSq = mx, sq
			}
			return
		}
		// stage j starts at from; choose where it ends (leaving a layer
		// for each later stage).
		for end := from + 1; end <= n-(k-1-j); end++ {
			if j == k-1 && end != n {
				continue
			}
			cur[j+1] = end
			rec(j+1, end)
		}
		cur[k] = n
	}
	cur[0] = 0
	rec(0, 0)
	return best, nil
}

// checkBoundaries validates explicit stage boundaries for k stages of m.
func checkBoundaries(m *models.Model, b []int, k int) error {
	n := m.NumLayers()
	if len(b) != k+1 {
		return fmt.Errorf("pipeline: %d boundaries for %d stages, want %d", len(b), k, k+1)
	}
	if b[0] != 0 || b[k] != n {
		return fmt.Errorf("pipeline: boundaries %v must run from 0 to %d (the layer count)", b, n)
	}
	for i := 0; i < k; i++ {
		if b[i+1] <= b[i] {
			return fmt.Errorf("pipeline: boundaries %v not strictly increasing", b)
		}
	}
	return nil
}
