package main

import "testing"

// TestDeviceSyncBN: `train -device cuda -syncbn -nproc 2 -backend nccl`
// (cnn-bn; two worker processes sharing the fake's GPU, the batch norms'
// statistics over both ranks' batches on the device, syncbn.Device over
// NCCL, the gradients averaged by NCCL) ends where one rank at double
// batch ends and where -syncbn on the CPU (two ranks over shm) ends,
// within deviceTol; -strategy zero1 and zero3 (parameters gathered unit
// by unit) with -syncbn likewise. The
// references run on the CPU (the device equals it within deviceTol:
// TestDeviceMatchesCPU; the fake's cnn-bn is slow), and the CPU without
// -syncbn ends elsewhere (each rank's statistics its own batch's), so
// the comparison can tell.
//
// The device hook equals the host hook bit for bit: the same run over
// -backend shm (the statistics through host memory: devmodel.HostSyncBN
// over package syncbn's Syncer; the gradients averaged on the host, which
// at 2 ranks gives NCCL's bits) ends with the same eval loss, train loss
// and gradient norms exactly; and the NCCL run spent no time in the host
// hook (its syncbn_ms_per_step is 0; shm's is not), so the statistics
// stayed on the device.
func TestDeviceSyncBN(t *testing.T) {
	common := []string{"-model", "cnn-bn", "-data", "synthetic", "-limit", "64", "-epochs", "1", "-seed", "4", "-json", "-progress=false"}
	two := trainEnv(t, ncclSharedEnv(t), append([]string{"-device", "cuda", "-backend", "nccl", "-nproc", "2", "-batch", "8", "-syncbn"}, common...)...)
	one := trainEnv(t, nil, append([]string{"-device", "cpu", "-nproc", "1", "-batch", "16"}, common...)...)
	cpu := trainEnv(t, nil, append([]string{"-device", "cpu", "-backend", "shm", "-nproc", "2", "-batch", "8", "-syncbn"}, common...)...)
	if !two.SyncBN || two.WorldSize != 2 || two.Device != "cuda:0" {
		t.Fatalf("2 ranks: %+v", two)
	}
	checkNear(t, "cuda -syncbn, 2 ranks vs 1 rank at double batch", two, one)
	checkNear(t, "cuda -syncbn, 2 ranks vs cpu -syncbn, 2 ranks", two, cpu)
	host := trainEnv(t, fakeCUDAEnv(t), append([]string{"-device", "cuda", "-backend", "shm", "-nproc", "2", "-batch", "8", "-syncbn"}, common...)...)
	if two.EvalLoss != host.EvalLoss || two.TrainLoss != host.TrainLoss || two.GradNormP50 != host.GradNormP50 {
		t.Errorf("cuda -syncbn over nccl (device hook): eval loss %v, train loss %v, grad norm p50 %v; over shm (host hook): %v, %v, %v; want the same bits",
			two.EvalLoss, two.TrainLoss, two.GradNormP50, host.EvalLoss, host.TrainLoss, host.GradNormP50)
	}
	if two.SyncBNMsPerStep != 0 || !(host.SyncBNMsPerStep > 0) {
		t.Errorf("time in the host SyncBN hook per step: %v ms over nccl, %v ms over shm; want 0 (the statistics stay on the device) and more",
			two.SyncBNMsPerStep, host.SyncBNMsPerStep)
	}
	for _, st := range []string{"zero1", "zero3"} {
		zero := trainEnv(t, ncclSharedEnv(t), append([]string{"-device", "cuda", "-backend", "nccl", "-nproc", "2", "-batch", "8", "-syncbn", "-strategy", st}, common...)...)
		checkNear(t, "cuda -syncbn "+st+", 2 ranks vs 1 rank at double batch", zero, one)
		if zero.SyncBNMsPerStep != 0 {
			t.Errorf("%s over nccl spent %v ms a step in the host SyncBN hook: want 0 (on the device)", st, zero.SyncBNMsPerStep)
		}
	}
	plain := trainEnv(t, nil, append([]string{"-device", "cpu", "-backend", "shm", "-nproc", "2", "-batch", "8"}, common...)...)
	if near(plain.EvalLoss, one.EvalLoss, deviceTol) {
		t.Errorf("without -syncbn the eval loss is one rank's at double batch too (%v): the test cannot tell", plain.EvalLoss)
	}
	t.Logf("eval loss: %v (cuda -syncbn over nccl, 2 ranks), %v (over shm), %v (1 rank x 2 batch), %v (cpu -syncbn), %v (2 ranks, no syncbn)",
		two.EvalLoss, host.EvalLoss, one.EvalLoss, cpu.EvalLoss, plain.EvalLoss)
}
