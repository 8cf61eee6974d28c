#!/usr/bin/python3
"""PyTorch DDP peer for `train -model gpt`: the same model (gpt.py, the
twin of models/gpt.go), corpus and split, batch, context, optimizer,
schedule and clipping as gdist's gpt defaults, on Gloo.

    /usr/bin/python3 benchmarks/peers/torch_gpt_ddp.py --world 2 --steps 200

Data, as data/text.go and train.LoadData build it: every regular *.go file
below $(go env GOROOT)/src in sorted path order, a file held out when the
FNV-1a 32 hash of its slash-separated relative path is 0 mod 20; windows
of context+1 bytes starting every context bytes. Training draws a seeded
permutation of the training windows each epoch (its own order, not
gdist's sampler), rank r taking every world-th window of each global
batch. Held-out bits per byte: the mean cross entropy / ln 2 over the
same 1024 held-out windows gdist evaluates (window i*n/1024), on rank 0,
after the last step, at evaluation batch 64.

Optimizer: AdamW (betas 0.9, 0.999, eps 1e-8, weight decay on every
parameter, as gdist's), lr linear warm-up over --warmup steps then cosine
to 0.1 x lr at the last step (optim.Schedule.At), global gradient norm
clipped to --clip after DDP's averaging. Initial weights are PyTorch's
default initialisation (not gdist's), or with --init a gdist checkpoint's
(e.g. one saved by `train -model gpt -steps 1 -warmup 0 -lr 1e-12 -save F`),
loaded by name with strict=True.

Prints one JSON line: tokens_per_sec (all ranks; training steps only:
steps x global batch x context over the loop's wall time between two
barriers, evaluation and start-up excluded), loop_tokens_per_sec (global
batch x context over rank 0's median step), step_ms_p50, eval_bpb,
unigram_bpb, train_loss, clipped_steps, grad_norm_p50 (before clipping)."""
import argparse, json, math, os, statistics, subprocess, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

import gpt as gptmod
from peerutil import free_port

EVAL_WINDOWS = 1024


def goroot():
    if os.environ.get("GOROOT"):
        return os.environ["GOROOT"]
    try:
        return subprocess.check_output(["go", "env", "GOROOT"], text=True).strip()
    except Exception:
        return "/usr/local/go"


def fnv1a32(b):
    h = 0x811C9DC5
    for c in b:
        h = ((h ^ c) * 0x01000193) & 0xFFFFFFFF
    return h


def load_corpus(root):
    files = []
    for d, dirs, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            if n.endswith(".go") and os.path.isfile(p) and not os.path.islink(p):
                files.append(p)
    files.sort(key=lambda s: s.encode())  # Go's sort.Strings: byte order
    train, test = [], []
    for p in files:
        rel = os.path.relpath(p, root).replace(os.sep, "/")
        with open(p, "rb") as f:
            b = f.read()
        (test if fnv1a32(rel.encode()) % 20 == 0 else train).append(b)
    return b"".join(train), b"".join(test), len(files)


def unigram_bits(train, test):
    tr = torch.bincount(torch.frombuffer(bytearray(train), dtype=torch.uint8).long(), minlength=256).double()
    te = torch.bincount(torch.frombuffer(bytearray(test), dtype=torch.uint8).long(), minlength=256).double()
    p = (tr + 1) / (len(train) + 256)
    return float(-(te * torch.log2(p)).sum() / len(test))


def windows(data, starts, c):
    idx = starts[:, None] * c + torch.arange(c + 1)[None, :]
    w = data[idx].long()
    return w[:, :c], w[:, 1:]


def lr_at(step, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    p = min(1.0, (step - a.warmup) / max(a.steps - a.warmup, 1))
    return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def worker(rank, a, port, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(a.threads or max(1, (os.cpu_count() or 1) // a.world))
    torch.manual_seed(a.seed)
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    train_b, test_b, nfiles = load_corpus(a.corpus)
    train = torch.frombuffer(bytearray(train_b), dtype=torch.uint8)
    test = torch.frombuffer(bytearray(test_b), dtype=torch.uint8)
    c = a.context
    ntr, nte = (len(train_b) - 1) // c, (len(test_b) - 1) // c
    model = gptmod.GPT(a.layers, a.dmodel, a.heads, c)
    if a.init:
        model.load_state_dict(gptmod.load_safetensors(a.init), strict=True)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=a.weight_decay)
    gb = a.batch * a.world
    per_epoch = ntr // gb
    times, norms, loss = [], [], float("nan")
    dist.barrier()
    t0 = time.perf_counter()
    perm = None
    for step in range(a.steps):
        ts = time.perf_counter()
        ep, s = divmod(step, per_epoch)
        if s == 0:
            perm = torch.randperm(ntr, generator=torch.Generator().manual_seed(a.seed * 1000 + ep))
        x, y = windows(train, perm[s * gb + rank:(s + 1) * gb:a.world], c)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        opt.zero_grad(set_to_none=True)
        out = ddp(x)
        l = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        l.backward()
        if a.clip > 0:
            norms.append(float(torch.nn.utils.clip_grad_norm_(ddp.parameters(), a.clip)))
        opt.step()
        loss = l.item()
        times.append((time.perf_counter() - ts) * 1e3)
    dist.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        model.eval()
        tot, n = 0.0, 0
        ev = torch.tensor([i * nte // EVAL_WINDOWS for i in range(min(EVAL_WINDOWS, nte))])
        with torch.no_grad():
            for k in range(0, len(ev), a.eval_batch):
                x, y = windows(test, ev[k:k + a.eval_batch], c)
                out = model(x)
                tot += F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), reduction="sum").item()
                n += y.numel()
        p50 = statistics.median(times)
        q.put({"peer": "torch-ddp-gloo", "torch": torch.__version__, "world_size": a.world,
               "threads_per_rank": torch.get_num_threads(), "model": f"gpt L{a.layers} d{a.dmodel} h{a.heads} c{c}",
               "params": sum(p.numel() for p in model.parameters()), "files": nfiles,
               "train_bytes": len(train_b), "test_bytes": len(test_b), "batch": a.batch, "steps": a.steps,
               "tokens_per_sec": a.steps * gb * c / dt, "loop_tokens_per_sec": gb * c / (p50 / 1e3),
               "step_ms_p50": p50, "train_loss": loss, "eval_bpb": tot / n / math.log(2),
               "unigram_bpb": unigram_bits(train_b, test_b), "loop_seconds": dt,
               "clipped_steps": sum(n > a.clip for n in norms), "grad_norm_p50": statistics.median(norms) if norms else 0})
    dist.destroy_process_group()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8, help="per rank")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dmodel", type=int, default=160)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--eval-batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0, help="per rank (0: cores / world)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--corpus", default="")
    ap.add_argument("--init", default="", help="start from this gdist checkpoint's weights")
    a = ap.parse_args()
    a.corpus = a.corpus or os.path.join(goroot(), "src")
    q = mp.get_context("spawn").SimpleQueue()
    mp.spawn(worker, args=(a, free_port(), q), nprocs=a.world, join=True)
    print(json.dumps(q.get()))
