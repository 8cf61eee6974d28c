#!/usr/bin/env python3
"""PyTorch eager peer of `train -device cuda`: one process trains the same
model as gdist's zoo on one GPU, at the same batch, optimizer and
precision, and prints one JSON line with its throughput and peak memory.

    python3 torch_gpu_train.py --model gpt-L12-D768-H12-T1024 --batch 8 --precision bf16
    python3 torch_gpu_train.py --model mlp --batch 32 --optimizer sgd --lr 0.01
    python3 torch_gpu_train.py --model gpt-L1-D32-H2-T16 --batch 2 --device cpu   # a check without a GPU

Models (models/model.go, models/gpt.go):

- gpt-L{L}-D{D}-H{H}-T{T}: gpt.py's twin of gdist's GPT, module for module:
  byte tokens (vocabulary 256) embedded, plus learnt position embeddings;
  L pre-LayerNorm residual blocks (x + attn(LN(x)), then x + MLP(LN(x)),
  the MLP D -> 4D, exact (erf) GELU, 4D -> D); a final LayerNorm and an
  untied head D -> 256; LayerNorm eps 1e-5; no dropout; the loss the mean
  cross entropy over every position's next byte. Attention's parameters
  are nn.MultiheadAttention's (in_proj_weight [3D, D] and bias, out_proj);
  --attn sdpa (default) computes it with F.scaled_dot_product_attention
  (is_causal=True: flash or memory-efficient kernels, the fastest eager
  PyTorch has), --attn mha with nn.MultiheadAttention itself and a causal
  mask (gpt.py's module as it is). The parameter count is checked against
  gdist's (the same formula as models/gpt.go's layers): both are printed,
  and a mismatch fails.
- mlp (784-256-128-10, ReLU), cnn (conv 3x3 pad 1 1->32, ReLU, max-pool 2,
  conv 32->64, ReLU, max-pool 2, flatten, 3136->128, ReLU, 128->10), cnn-bn
  (BatchNorm2d after each convolution): cross entropy over 10 classes.

Optimizers as train's defaults: gpt AdamW (lr 3e-3, betas 0.9/0.999,
eps 1e-8, weight decay 0.01 on every parameter), the gradient's global
norm clipped to 1.0; mlp/cnn SGD with momentum 0.9 (lr 0.05, no weight
decay). PyTorch's default implementations (foreach on CUDA). The learning
rate is held constant: a schedule costs nothing on the device.

Precision: fp32 (TF32 off for matmuls and cuDNN), tf32 (TF32 on for both:
torch.backends.cuda.matmul.fp32_precision and cudnn.conv.fp32_precision
"tf32" from PyTorch 2.9, the allow_tf32 flags before), bf16 (torch.autocast(device_type, dtype=torch.bfloat16) around the forward
pass and the loss; parameters, gradients and the optimizer in fp32; TF32
off).

Timing, as train's: each step uploads a batch from host memory (random
bytes or images: the content does not change the time), runs forward,
backward, clipping and the update, and reads the loss (loss.item(), which
waits for the device; train reads every step's loss too). The first
--warmup steps are excluded; of the --steps timed ones the median step
gives tokens_per_sec (gpt: batch x T / median) and samples_per_sec, the
mean is reported beside it. peak_memory_bytes is
torch.cuda.max_memory_allocated over the whole run (parameters, gradients,
optimizer state, activations), peak_reserved_bytes the caching
allocator's. With --profile-steps N, N more steps run under torch.profiler
after the timed ones: profile_top lists the kernels with the most device
time, ms per step (where PyTorch's step goes, beside gdist's profile). On --device cpu the same loop runs on the host (a test of
this script, not a benchmark).
"""
import argparse
import json
import math
import os
import re
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt as gptmod  # noqa: E402

GPT_RE = re.compile(r"^gpt-L(\d+)-D(\d+)-H(\d+)-T(\d+)$")
PRESETS = {"gpt": (4, 160, 4, 64), "gpt-large": (8, 256, 8, 128)}


def gpt_shape(name):
    if name in PRESETS:
        return PRESETS[name]
    m = GPT_RE.match(name)
    return tuple(int(v) for v in m.groups()) if m else None


def gdist_gpt_params(layers, d, t, vocab=gptmod.VOCAB):
    """Parameters of gdist's GPT (models/gpt.go's layers, nn's shapes)."""
    ln = 2 * d
    attn = 3 * d * d + 3 * d + d * d + d
    mlp = d * 4 * d + 4 * d + 4 * d * d + d
    return vocab * d + t * d + layers * (2 * ln + attn + mlp) + ln + d * vocab + vocab


def gdist_image_params(name):
    """Parameters of gdist's mlp, cnn and cnn-bn (models/model.go)."""
    lin = lambda i, o: i * o + o  # noqa: E731
    if name == "mlp":
        return lin(784, 256) + lin(256, 128) + lin(128, 10)
    conv = 32 * 9 + 32 + 64 * 32 * 9 + 64
    bn = 2 * 32 + 2 * 64 if name == "cnn-bn" else 0
    return conv + bn + lin(3136, 128) + lin(128, 10)


class SDPAttention(gptmod.CausalSelfAttention):
    """gpt.py's attention (nn.MultiheadAttention's parameters, unchanged)
    computed by F.scaled_dot_product_attention with is_causal=True (an
    explicit softmax where that function is missing: PyTorch before 2.0)."""

    def forward(self, x):
        n, t, c = x.shape
        h = self.num_heads
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
        q, k, v = qkv.view(n, t, 3, h, c // h).permute(2, 0, 3, 1, 4)
        if hasattr(F, "scaled_dot_product_attention"):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(c // h)
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), 1)
            o = s.masked_fill(mask, float("-inf")).softmax(-1) @ v
        return self.out_proj(o.transpose(1, 2).reshape(n, t, c))


def build(name, attn):
    """The model, its gdist parameter count, sample shape and classes."""
    g = gpt_shape(name)
    if g:
        layers, d, h, t = g
        if d % h:
            raise SystemExit(f"torch_gpu_train.py: {name}: {h} heads do not divide dimension {d}")
        model = gptmod.GPT(layers, d, h, t)
        if attn == "sdpa":
            for mod in model.modules():
                if isinstance(mod, gptmod.Residual) and isinstance(mod.fn[1], gptmod.CausalSelfAttention):
                    mod.fn[1].__class__ = SDPAttention
        return model, gdist_gpt_params(layers, d, t), (t,), gptmod.VOCAB
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10)), gdist_image_params(name), (784,), 10
    if name in ("cnn", "cnn-bn"):
        mods = []
        for cin, cout in ((1, 32), (32, 64)):
            mods.append(nn.Conv2d(cin, cout, 3, padding=1))
            if name == "cnn-bn":
                mods.append(nn.BatchNorm2d(cout))
            mods += [nn.ReLU(), nn.MaxPool2d(2)]
        mods += [nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10)]
        return nn.Sequential(*mods), gdist_image_params(name), (1, 28, 28), 10
    raise SystemExit(f"torch_gpu_train.py: unknown model {name!r}: want mlp, cnn, cnn-bn, gpt, gpt-large or gpt-L<l>-D<d>-H<h>-T<t>")


def set_precision(p):
    """TF32 on for matmuls and cuDNN with tf32, off otherwise: PyTorch
    2.9's settings (fp32_precision "tf32" or "ieee") where they exist, the
    allow_tf32 flags before (mixing the two is an error in 2.9 and later).
    Returns what was set."""
    tf32 = p == "tf32"
    if hasattr(torch.backends, "fp32_precision"):
        mode = "tf32" if tf32 else "ieee"
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.conv.fp32_precision = mode
        return "fp32_precision=" + mode
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    return "allow_tf32=%s" % tf32


def profile_top(step, n, cuda, k=15):
    """n more steps under torch.profiler: the k kernels (on the CPU: ops)
    with the most self time, in ms per step, most first."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        for i in range(n):
            step(i)
        if cuda:
            torch.cuda.synchronize()

    def self_time(e):  # microseconds; device time on a GPU (names by version)
        if not cuda:
            return e.self_cpu_time_total
        for f in ("self_device_time_total", "self_cuda_time_total"):
            if hasattr(e, f):
                return getattr(e, f)
        return 0

    ev = list(prof.key_averages())
    if cuda:  # the kernels themselves, not also the ops that launched them
        kernels = [e for e in ev if str(getattr(e, "device_type", "")).endswith("CUDA")]
        ev = kernels or ev
    ev.sort(key=self_time, reverse=True)
    return [{"name": e.key[:80], "ms_per_step": self_time(e) / 1e3 / n, "calls_per_step": e.count / n} for e in ev[:k] if self_time(e) > 0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gpt-L12-D768-H12-T1024")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    ap.add_argument("--attn", choices=["sdpa", "mha"], default="sdpa", help="gpt: how attention is computed (same parameters)")
    ap.add_argument("--optimizer", choices=["adamw", "adam", "sgd"], help="default: train's for the model (gpt adamw, else sgd)")
    ap.add_argument("--lr", type=float, help="default: train's (gpt 3e-3, sgd 0.05, adam 1e-3)")
    ap.add_argument("--weight-decay", type=float, help="default: gpt 0.01, else 0")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--clip", type=float, help="global gradient norm (default: gpt 1.0, else none)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (--device cpu; 0: PyTorch's)")
    ap.add_argument("--profile-steps", type=int, default=0, help="after the timed steps, this many more under torch.profiler: the kernels taking the most device time (profile_top, ms per step)")
    ap.add_argument("--params-only", action="store_true", help="build the model on the host, print its parameter counts (torch's and gdist's) and exit")
    a = ap.parse_args(argv)
    if a.batch < 1 or a.steps < 1 or a.warmup < 0:
        raise SystemExit("torch_gpu_train.py: --batch and --steps must be positive, --warmup not negative")
    if a.params_only:
        model, want_params, _, _ = build(a.model, a.attn)
        n_params = sum(p.numel() for p in model.parameters())
        print(json.dumps({"peer": "torch", "model": a.model, "params": n_params, "gdist_params": want_params, "params_match": n_params == want_params}))
        return 0 if n_params == want_params else 1
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("torch_gpu_train.py: --device %s but torch.cuda.is_available() is false (torch %s); use --device cpu to check the script" % (a.device, torch.__version__))
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    tf32_setting = set_precision(a.precision)
    if cuda:
        if dev.index is None:  # "cuda": set_device needs an index (PyTorch 2.11 refuses a bare "cuda")
            dev = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    is_gpt = gpt_shape(a.model) is not None
    model, want_params, shape, classes = build(a.model, a.attn)
    model = model.to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    opt_name = a.optimizer or ("adamw" if is_gpt else "sgd")
    lr = a.lr if a.lr is not None else (3e-3 if is_gpt else {"sgd": 0.05}.get(opt_name, 1e-3))
    wd = a.weight_decay if a.weight_decay is not None else (0.01 if is_gpt else 0.0)
    clip = a.clip if a.clip is not None else (1.0 if is_gpt else 0.0)
    if opt_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=a.momentum, weight_decay=wd)
    elif opt_name == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)

    # A few host batches, cycled (content does not change the time).
    g = torch.Generator().manual_seed(a.seed)
    batches = []
    for _ in range(4):
        if is_gpt:
            ids = torch.randint(0, gptmod.VOCAB, (a.batch, shape[0] + 1), generator=g)
            batches.append((ids[:, :-1].contiguous(), ids[:, 1:].contiguous()))
        else:
            batches.append((torch.rand((a.batch,) + shape, generator=g), torch.randint(0, classes, (a.batch,), generator=g)))
    amp = a.precision == "bf16"

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    model.train()
    times, losses = [], []

    def step(i):
        x, y = batches[i % len(batches)]
        x, y = x.to(dev), y.to(dev)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp):
            out = model(x)
            loss = F.cross_entropy(out.reshape(-1, classes), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        return loss.item()  # waits for the device, as train's per-step loss check

    sync()
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        lv = step(i)
        dt = time.perf_counter() - t0
        losses.append(lv)
        if i >= a.warmup:
            times.append(dt)
        if not math.isfinite(lv):
            raise SystemExit(f"torch_gpu_train.py: step {i}: loss {lv}")
    sync()
    top = profile_top(step, a.profile_steps, cuda) if a.profile_steps > 0 else None
    med = statistics.median(times)
    mean = statistics.fmean(times)
    per = shape[0] if is_gpt else 1
    r = {
        "peer": "torch",
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
        "model": a.model,
        "params": n_params,
        "gdist_params": want_params,
        "params_match": n_params == want_params,
        "batch": a.batch,
        "precision": a.precision,
        "tf32_setting": tf32_setting,
        "optimizer": opt_name,
        "lr": lr,
        "weight_decay": wd,
        "clip": clip,
        "attn": a.attn if is_gpt else None,
        "warmup_steps": a.warmup,
        "steps": a.steps,
        "step_ms_p50": med * 1e3,
        "step_ms_mean": mean * 1e3,
        "samples_per_sec": a.batch / med,
        "mean_samples_per_sec": a.batch / mean,
        "loss_first": losses[0],
        "loss_last": losses[-1],
    }
    if is_gpt:
        r["tokens_per_sec"] = a.batch * per / med
        r["mean_tokens_per_sec"] = a.batch * per / mean
    if top is not None:
        r["profile_steps"] = a.profile_steps
        r["profile_top"] = top
    if cuda:
        r["peak_memory_bytes"] = torch.cuda.max_memory_allocated(dev)
        r["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(dev)
    print(json.dumps(r), flush=True)
    if n_params != want_params:
        print(f"torch_gpu_train.py: {a.model}: {n_params} parameters here, {want_params} in gdist's model: the twin has drifted", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
