package devmodel_test

import (
	"testing"
	"time"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// Issue 28: the host's wait at a step's end (the loss's readback) costs
// (nearly) no CPU while the device works, as comm/nccl's watcher's
// (TestWaitCostsNoCPU there). The fake spins its host waits as CUDA's
// default scheduling does (cudafake.SpinWaits: cudaStreamSynchronize and
// a non-blocking-sync event's wait keep a core busy) and starts every
// kernel late (KernelDelay): over three such steps the process used under
// 20% of a core (1-6% here; a wait with cudaStreamSynchronize uses a whole
// core, or whatever share of one a loaded machine gives it).
func TestStepWaitCostsNoCPU(t *testing.T) {
	cudafake.RequireFake(t)
	const batch, steps = 8, 3
	m, err := models.New("mlp", 1)
	if err != nil {
		t.Fatal(err)
	}
	d, err := devmodel.Place(m, devmodel.Config{Device: dev, Batch: batch, Optim: optim.Config{Name: "sgd", LR: 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	x, y := devtest.Images(0, batch, 784)
	if _, err := d.Step(x, y); err != nil { // warm: kernels compiled, buffers made
		t.Fatal(err)
	}
	cudafake.SpinWaits(t, true)
	cudafake.KernelDelay(t, 20*time.Millisecond)
	cpu0, wall0 := cudafake.CPUTime(t), time.Now()
	for i := 0; i < steps; i++ {
		if _, err := d.Step(x, y); err != nil {
			t.Fatal(err)
		}
	}
	cpu, wall := cudafake.CPUTime(t)-cpu0, time.Since(wall0)
	cudafake.KernelDelay(t, 0)
	t.Logf("%d steps in %v: %v of CPU (%.2f%%)", steps, wall.Round(time.Millisecond), cpu, 100*cpu.Seconds()/wall.Seconds())
	if wall < steps*100*time.Millisecond {
		t.Fatalf("%d steps took %v, not the fake's delays: the test measures nothing", steps, wall)
	}
	if cpu > wall/5 {
		t.Errorf("the process used %v of CPU during %v of steps: the step's wait spins", cpu, wall)
	}
}
