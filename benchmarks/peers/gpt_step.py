"""One process of benchmarks/gptstep: PyTorch's training step on the gpt
twin (gpt.py), timed the way gptstep times gdist's.

    OMP_NUM_THREADS=1 python3 gpt_step.py --layers 4 --dim 256 --heads 4 \
        --context 128 --batch 32 --steps 8 --warmup 2 --threads 1 [--no-optim]

Tokens x[i] = (7 i) % 256, labels (7 i + 1) % 256 (gdist's side uses the
same); a step is zero_grad, forward, cross-entropy, backward and, unless
--no-optim, AdamW(lr 3e-3). Prints one JSON line: each timed step's wall
and CPU milliseconds.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt as gptmod  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    for name, default in (("layers", 4), ("dim", 256), ("heads", 4), ("context", 128), ("batch", 32), ("steps", 8), ("warmup", 2), ("threads", 1)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--no-optim", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    m = gptmod.GPT(a.layers, a.dim, a.heads, a.context)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    n = a.batch * a.context
    idx = torch.arange(n, dtype=torch.long)
    x = ((idx * 7) % gptmod.VOCAB).reshape(a.batch, a.context)
    y = ((idx * 7 + 1) % gptmod.VOCAB).reshape(a.batch, a.context)

    def step():
        opt.zero_grad(set_to_none=True)
        out = m(x)
        loss = F.cross_entropy(out.reshape(-1, gptmod.VOCAB), y.reshape(-1))
        loss.backward()
        if not a.no_optim:
            opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    wall, cpu = [], []
    for _ in range(a.steps):
        w0, c0 = time.perf_counter(), time.process_time()
        step()
        wall.append((time.perf_counter() - w0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    print(json.dumps({"impl": "torch " + torch.__version__, "threads": torch.get_num_threads(), "wall_ms": wall, "cpu_ms": cpu}))


if __name__ == "__main__":
    main()
