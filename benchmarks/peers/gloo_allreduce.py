#!/usr/bin/python3
"""PyTorch Gloo peer for benchmarks/peerbench: torch.distributed.all_reduce
of float32 (sum) over loopback TCP, timed like commbench (3 untimed
iterations, then about 64 MiB of traffic: 3..2000 iterations, between
barriers; rank 0 reports) and checked once per size. One thread per rank.
Prints one JSON object per size in commbench's -json schema.

    /usr/bin/python3 benchmarks/peers/gloo_allreduce.py WORLD SIZE_BYTES...
"""
import json, os, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from peerutil import free_port


def iterations(nbytes):
    return max(3, min(2000, (64 << 20) // nbytes))


def worker(rank, world, sizes, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for nbytes in sizes:
        n = nbytes // 4
        idx = torch.arange(n)
        base = ((idx + rank) % 5).float()
        x = base.clone()
        dist.all_reduce(x)
        want = sum(((idx + r) % 5).float() for r in range(world))
        ok = bool(torch.equal(x, want))
        iters = iterations(nbytes)
        for _ in range(3):
            dist.all_reduce(x)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        dist.barrier()
        dt = (time.perf_counter() - t0) / iters
        if rank == 0:
            alg = nbytes / dt / 1e9
            print(json.dumps({"op": "all_reduce", "backend": "gloo", "world": world, "bytes": nbytes, "count": n,
                              "dtype": "float32", "iters": iters, "time_us": dt * 1e6, "algbw_gbs": alg,
                              "busbw_gbs": alg * 2 * (world - 1) / world, "correct": ok}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: gloo_allreduce.py WORLD SIZE_BYTES...")
    world = int(sys.argv[1])
    sizes = [int(a) for a in sys.argv[2:]]
    mp.spawn(worker, args=(world, sizes, free_port()), nprocs=world)
