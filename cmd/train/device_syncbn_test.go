package main

import "testing"

// TestDeviceSyncBN: `train -device cuda -syncbn -nproc 2 -backend nccl`
// (cnn-bn; two worker processes sharing the fake's GPU, the batch norms'
// statistics over both ranks' batches through devmodel.HostSyncBN and
// package syncbn, the gradients averaged by NCCL) ends where one rank at
// double batch on the device ends and where -syncbn on the CPU (two
// ranks over shm) ends, within deviceTol; without -syncbn it does not
// (each rank's statistics are its own batch's). -strategy zero1 with
// -syncbn likewise.
func TestDeviceSyncBN(t *testing.T) {
	common := []string{"-model", "cnn-bn", "-data", "synthetic", "-limit", "64", "-epochs", "1", "-seed", "4", "-json", "-progress=false"}
	two := trainEnv(t, ncclSharedEnv(t), append([]string{"-device", "cuda", "-backend", "nccl", "-nproc", "2", "-batch", "8", "-syncbn"}, common...)...)
	one := trainEnv(t, fakeCUDAEnv(t), append([]string{"-device", "cuda", "-nproc", "1", "-batch", "16"}, common...)...)
	cpu := trainEnv(t, nil, append([]string{"-device", "cpu", "-backend", "shm", "-nproc", "2", "-batch", "8", "-syncbn"}, common...)...)
	if !two.SyncBN || two.WorldSize != 2 || two.Device != "cuda:0" {
		t.Fatalf("2 ranks: %+v", two)
	}
	checkNear(t, "cuda -syncbn, 2 ranks vs cuda, 1 rank at double batch", two, one)
	checkNear(t, "cuda -syncbn, 2 ranks vs cpu -syncbn, 2 ranks", two, cpu)
	zero := trainEnv(t, ncclSharedEnv(t), append([]string{"-device", "cuda", "-backend", "nccl", "-nproc", "2", "-batch", "8", "-syncbn", "-strategy", "zero1"}, common...)...)
	checkNear(t, "cuda -syncbn zero1, 2 ranks vs cuda, 1 rank at double batch", zero, one)
	plain := trainEnv(t, ncclSharedEnv(t), append([]string{"-device", "cuda", "-backend", "nccl", "-nproc", "2", "-batch", "8"}, common...)...)
	if near(plain.EvalLoss, one.EvalLoss, deviceTol) {
		t.Errorf("without -syncbn the eval loss is one rank's at double batch too (%v): the test cannot tell", plain.EvalLoss)
	}
	t.Logf("eval loss: %v (cuda -syncbn, 2 ranks), %v (cuda, 1 rank x 2 batch), %v (cpu -syncbn), %v (cuda, 2 ranks, no syncbn)",
		two.EvalLoss, one.EvalLoss, cpu.EvalLoss, plain.EvalLoss)
}
