package main

import "testing"

// TestDeviceSyncBN: `train -device cuda -syncbn -nproc 2 -backend nccl`
// (cnn-bn; two worker processes sharing the fake's GPU, the batch norms'
// statistics over both ranks' batches through devmodel.HostSyncBN and
// package syncbn, the gradients averaged by NCCL) ends where one rank at
// double batch ends and where -syncbn on the CPU (two ranks over shm)
// ends, within deviceTol; -strategy zero1 with -syncbn likewise. The
// references run on the CPU (the device equals it within deviceTol:
// TestDeviceMatchesCPU; the fake's cnn-bn is slow), and the CPU without
// -syncbn ends elsewhere (each rank's statistics its own batch's), so
// the comparison can tell.
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
	zero := trainEnv(t, ncclSharedEnv(t), append([]string{"-device", "cuda", "-backend", "nccl", "-nproc", "2", "-batch", "8", "-syncbn", "-strategy", "zero1"}, common...)...)
	checkNear(t, "cuda -syncbn zero1, 2 ranks vs 1 rank at double batch", zero, one)
	plain := trainEnv(t, nil, append([]string{"-device", "cpu", "-backend", "shm", "-nproc", "2", "-batch", "8"}, common...)...)
	if near(plain.EvalLoss, one.EvalLoss, deviceTol) {
		t.Errorf("without -syncbn the eval loss is one rank's at double batch too (%v): the test cannot tell", plain.EvalLoss)
	}
	t.Logf("eval loss: %v (cuda -syncbn, 2 ranks), %v (1 rank x 2 batch), %v (cpu -syncbn), %v (2 ranks, no syncbn)",
		two.EvalLoss, one.EvalLoss, cpu.EvalLoss, plain.EvalLoss)
}
