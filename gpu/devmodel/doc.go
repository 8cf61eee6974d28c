// Package devmodel places an nn model on a GPU and trains it there: the
// parameters, gradients and optimizer state in device memory in package
// flat's layout (one buffer each, every tensor at its nn.ParamInfo
// offset, as the host model's Flat.Value and Flat.Grad, so that DDP and
// ZeRO can reduce the device gradients in place over NCCL), a step's
// forward pass, mean cross-entropy and backward pass from gpu/kernels
// (per step only the batch goes up and the loss, 4 bytes, comes down),
// and package optim's updates (SGD with momentum, Adam, AdamW, gradient
// clipping by global norm; the learning rate per step from the caller,
// optim.Schedule.At) on the device.
//
//	d, err := devmodel.Place(m, devmodel.Config{Device: 0, Batch: 32,
//		Optim: optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9}})
//	defer d.Close()
//	loss, err := d.Step(x, y) // forward, loss, backward, update, zero
//	err = d.CopyToHost()      // m's Flat.Value and BNs: save m as on the CPU
//
// Place walks the model's layer tree and maps each nn layer to its
// kernels (Layers lists them); a layer without device kernels (a user
// layer type, nn.Func, nn.Adapt, Tanh, SyncBatchNorm, a PositionEmbedding
// not right after an Embedding) is refused then, by its name and Go type,
// never in the middle of a step; Check does the same without a device. A
// user layer built of nn's layers (nn.Seq, nn.Residual and the layers
// above) runs unchanged. The activations and the layers' scratch are
// blocks of a caching pool (cuda.Pool), planned once per batch size: a
// step allocates nothing; PeakBytes reports the most device memory held.
//
// The arithmetic is gpu/kernels', within the tolerances its package
// documentation states per layer; trained for several steps, mlp, cnn,
// cnn-bn and a small gpt follow the CPU path (nn through gorgonia, optim
// on the host) within the tolerances of gpu/kernels' whole-model tests
// (TestMatchesCPU; see its comment for the measured differences).
package devmodel
