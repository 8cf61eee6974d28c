#!/usr/bin/python3
"""PyTorch DDP peer for benchmarks/ddpbench: the same models, data, batch
split and optimizer as gdist's `train`, on Gloo, one thread per rank.

    /usr/bin/python3 benchmarks/peers/torch_ddp.py --world 2 --model mlp --epochs 1 --batch 64

Prints one JSON line: {"peer": "torch-ddp-gloo", "world_size", "model",
"samples_per_sec" (training loop only, all ranks together), "step_ms_p50",
"test_accuracy", "eval_loss"}. Needs Debian's python3-torch and
dataset-fashion-mnist."""
import argparse, gzip, json, os, statistics, struct, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from peerutil import free_port

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # the normalisation gdist's data package uses


def read_idx(path):
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    t = torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8)
    return t.reshape(dims)


def load(split, data):
    pre = "train" if split == "train" else "t10k"
    def find(kind):
        for suf in ("", ".gz"):
            p = os.path.join(data, f"{pre}-{kind}-idx{3 if kind == 'images' else 1}-ubyte{suf}")
            if os.path.exists(p):
                return p
        raise SystemExit(f"missing {pre} {kind} in {data}")
    x = (read_idx(find("images")).float() / 255.0 - MEAN) / STD
    y = read_idx(find("labels")).long()
    return x.reshape(-1, 1, 28, 28), y


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    layers = []
    for cin, cout in ((1, 32), (32, 64)):
        layers.append(nn.Conv2d(cin, cout, 3, padding=1))
        if name == "cnn-bn":
            layers.append(nn.BatchNorm2d(cout))
        layers += [nn.ReLU(), nn.MaxPool2d(2)]
    layers += [nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10)]
    return nn.Sequential(*layers)


def worker(rank, a, port, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    x, y = load("train", a.data)
    if a.limit > 0:
        x, y = x[:a.limit], y[:a.limit]
    xt, yt = load("test", a.data)
    model = make_model(a.model)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb)
    if a.optimizer == "adam":
        opt = torch.optim.Adam(ddp.parameters(), lr=a.lr or 1e-3)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=a.lr or 0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    n = x.shape[0]
    gb = a.batch * a.world
    steps = n // gb
    times = []
    dist.barrier()
    t0 = time.perf_counter()
    for ep in range(a.epochs):
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(a.seed * 1000 + ep))
        for s in range(steps):
            ts = time.perf_counter()
            # rank r takes every world-th sample of the global batch, as gdist does
            idx = perm[s * gb + rank: (s + 1) * gb: a.world]
            opt.zero_grad()
            loss = loss_fn(ddp(x[idx]), y[idx])
            loss.backward()
            opt.step()
            times.append((time.perf_counter() - ts) * 1e3)
    dist.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        model.eval()
        with torch.no_grad():
            out = model(xt)
            acc = (out.argmax(1) == yt).float().mean().item()
            ev = loss_fn(out, yt).item()
        q.put({"peer": "torch-ddp-gloo", "torch": torch.__version__, "world_size": a.world, "model": a.model,
               "batch": a.batch, "epochs": a.epochs, "steps": a.epochs * steps,
               "samples_per_sec": a.epochs * steps * gb / dt, "step_ms_p50": statistics.median(times),
               "test_accuracy": acc, "eval_loss": ev})
    dist.destroy_process_group()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn", "cnn-bn"])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0)
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
    ap.add_argument("--bucket-mb", type=float, default=25)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=DATA)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.start_processes(worker, args=(a, free_port(), q), nprocs=a.world, start_method="spawn")
    print(json.dumps(q.get()), flush=True)
