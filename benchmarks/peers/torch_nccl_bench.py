#!/usr/bin/env python3
"""PyTorch peer for `commbench -backend nccl`: torch.distributed collectives
on the NCCL backend, timed and printed the way commbench (and nccl-tests)
print them: size, count, time per op, algorithm bandwidth (size / time) and
bus bandwidth (algbw times nccl-tests' bus factor).

    python3 benchmarks/peers/torch_nccl_bench.py                 # 1 GPU, all_reduce
    python3 benchmarks/peers/torch_nccl_bench.py --ops all_reduce,all_gather --sizes 4K,1M,64M --json
    torchrun --nproc-per-node 4 benchmarks/peers/torch_nccl_bench.py   # one process per GPU

Sizes follow nccl-tests and commbench: all_gather reports the total output,
reduce_scatter and all_to_all the total input. By default every timed
iteration waits for its op to finish on the GPU (issue, wait, synchronize),
like commbench's blocking loop; --overlap issues the iterations back to back
and synchronizes once, like nccl-tests. Each size ends with one checked run.
Without torchrun it runs as a single rank (world size 1)."""
import argparse
import json
import os
import sys
import time
from peerutil import free_port

OPS = ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all"]
DEFAULT_SIZES = "8,64,512,4K,32K,256K,1M,4M,16M,64M,256M"


def parse_size(s):
    s = s.strip().upper().rstrip("B")
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if s.endswith(suffix):
            s, mult = s[:-1], m
    return int(s) * mult


def bus_factor(op, n):
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="all_reduce", help="comma-separated, or all: " + ",".join(OPS))
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated sizes in bytes (K, M, G suffixes)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16", "float64", "int32"])
    ap.add_argument("--iters", type=int, default=0, help="timed iterations (0: about 1 GiB of traffic, 5..200)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--overlap", action="store_true", help="issue iterations back to back, synchronize once")
    ap.add_argument("--json", action="store_true", help="one JSON object per row (commbench's keys)")
    ap.add_argument("--share-gpu", action="store_true",
                    help="every rank on GPU 0, each process posing as its own NCCL host (NCCL_HOSTID per rank), "
                         "so that several ranks can run on a one-GPU machine")
    args = ap.parse_args()

    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print(f"torch_nccl_bench: PyTorch is not installed: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("torch_nccl_bench: torch sees no CUDA device", file=sys.stderr)
        return 2
    if not dist.is_nccl_available():
        print("torch_nccl_bench: this PyTorch has no NCCL backend", file=sys.stderr)
        return 2

    if "RANK" not in os.environ:  # not under torchrun: one rank
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if args.share_gpu:  # NCCL refuses two ranks of one host on one GPU
        os.environ["NCCL_HOSTID"] = f"torch-nccl-bench-{rank}"
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
        local = 0
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", rank=rank, world_size=world)

    dtype = getattr(torch, args.dtype)
    esize = torch.tensor([], dtype=dtype).element_size()
    ops = OPS if args.ops == "all" else [o.strip() for o in args.ops.split(",")]
    for o in ops:
        if o not in OPS:
            print(f"torch_nccl_bench: unknown op {o!r} (know {','.join(OPS)})", file=sys.stderr)
            return 2
    sizes = sorted(parse_size(s) for s in args.sizes.split(","))
    if rank == 0:
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:
            nccl = "?"
        print(f"# torch {torch.__version__}, NCCL {nccl}, {torch.cuda.get_device_name(dev)}, "
              f"{'overlapped' if args.overlap else 'blocking'} iterations", file=sys.stderr if args.json else sys.stdout)

    failed = 0
    for op in ops:
        if rank == 0 and not args.json:
            print(f"# {op}  backend=torch-nccl world={world} dtype={args.dtype}")
            print(f"# {'size(B)':>12} {'count':>12} {'time(us)':>10} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'check':>6}")
        for size in sizes:
            if op in ("all_gather", "reduce_scatter", "all_to_all"):
                k = size // esize // world
                count = k * world
                small = torch.empty(k, dtype=dtype, device=dev)
                big = torch.empty(k * world, dtype=dtype, device=dev)
                other = torch.empty(k * world, dtype=dtype, device=dev)
            else:
                count = size // esize
                buf = torch.empty(count, dtype=dtype, device=dev)

            def run():
                if op == "all_reduce":
                    return dist.all_reduce(buf, async_op=True)
                if op == "broadcast":
                    return dist.broadcast(buf, 0, async_op=True)
                if op == "reduce":
                    return dist.reduce(buf, 0, async_op=True)
                if op == "all_gather":
                    return dist.all_gather_into_tensor(big, small, async_op=True)
                if op == "reduce_scatter":
                    return dist.reduce_scatter_tensor(small, big, async_op=True)
                return dist.all_to_all_single(other, big, async_op=True)

            def fill():
                if op in ("all_gather",):
                    small.fill_(rank + 1)
                elif op in ("reduce_scatter", "all_to_all"):
                    big.copy_(torch.arange(count, device=dev).remainder(7).to(dtype) + rank)
                else:
                    buf.fill_(rank + 1)

            def check():
                r1 = float(rank + 1)
                if op == "all_reduce" or (op == "reduce" and rank == 0):
                    return bool(torch.all(buf == world * (world + 1) / 2))
                if op in ("broadcast",):
                    return bool(torch.all(buf == 1))
                if op == "reduce":
                    return bool(torch.all(buf == r1))
                if op == "all_gather":
                    want = torch.arange(world, device=dev).repeat_interleave(k).to(dtype) + 1
                    return bool(torch.equal(big, want))
                base = torch.arange(count, device=dev).remainder(7).to(dtype)
                if op == "reduce_scatter":
                    want = (base * world + world * (world - 1) / 2)[rank * k:(rank + 1) * k].to(dtype)
                    return bool(torch.equal(small, want))
                # all_to_all: block q of other comes from rank q's block `rank`
                want = torch.cat([base[rank * k:(rank + 1) * k] + q for q in range(world)]).to(dtype)
                return bool(torch.equal(other, want))

            iters = args.iters or int(min(200, max(5, (1 << 30) // max(size, 1))))
            for _ in range(args.warmup):
                run().wait()
            torch.cuda.synchronize()
            dist.barrier()
            start = time.perf_counter()
            if args.overlap:
                works = [run() for _ in range(iters)]
                for w in works:
                    w.wait()
                torch.cuda.synchronize()
            else:
                for _ in range(iters):
                    run().wait()
                    torch.cuda.synchronize()
            elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=dev)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's time
            t = elapsed.item()
            fill()
            run().wait()
            torch.cuda.synchronize()
            bad = torch.tensor([0 if check() else 1], device=dev)
            dist.all_reduce(bad)
            ok = bad.item() == 0
            failed += not ok
            algbw = size / t / 1e9 if size and t else 0.0
            row = {"op": op, "backend": "torch-nccl", "world": world, "bytes": size, "count": count,
                   "dtype": args.dtype, "iters": iters, "time_us": t * 1e6, "algbw_gbs": algbw,
                   "busbw_gbs": algbw * bus_factor(op, world), "correct": ok}
            if rank == 0:
                if args.json:
                    print(json.dumps(row), flush=True)
                else:
                    print(f"  {size:12d} {count:12d} {t * 1e6:10.1f} {algbw:12.3f} {row['busbw_gbs']:12.3f} "
                          f"{'ok' if ok else 'WRONG':>6}", flush=True)
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
