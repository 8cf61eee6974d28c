#!/usr/bin/env bash
# GPU verification of gdist's CUDA/NCCL path, in one command, on a machine
# with an NVIDIA GPU. Run it from the bundle benchmarks/gpu/build.sh made
# (bin/gpu/run.sh); it needs no Go, no compiler and no CUDA toolkit: only the
# driver, a libcudart and a libnccl (those of a pip-installed PyTorch do),
# and, for the comparison, PyTorch.
#
#   bin/gpu/run.sh                     # everything; results in bin/gpu/results
#   NP=2 SIZES=4K,1M,64M bin/gpu/run.sh
#
# It runs: the gpu/cuda tests; the comm/nccl conformance suite on real NCCL
# (world size 1, more with more GPUs); the comm/staging suite (tcp and inproc
# with device buffers, world sizes 2-4, ranks sharing the GPU); commbench
# -backend nccl; the same collectives through torch.distributed's NCCL
# backend; and a side-by-side table. Environment: GDIST_CUDART_PATH and
# GDIST_NCCL_PATH (found automatically when unset), NP (ranks for the
# benchmarks, default 1), SIZES, RESULTS (output directory).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$here/nccl.test" ]; then
	echo "run.sh: no test binaries next to it; run benchmarks/gpu/build.sh, then bin/gpu/run.sh" >&2
	exit 2
fi
RESULTS=${RESULTS:-$here/results}
NP=${NP:-1}
SIZES=${SIZES:-8,64,512,4K,32K,256K,1M,4M,16M,64M,256M,1G}
mkdir -p "$RESULTS"
summary=()
fail=0
step() { echo; echo "=================== $*"; }
note() { summary+=("$1"); [ "${2:-0}" = 0 ] || fail=1; }

step "machine"
uname -srm
ldd --version 2>&1 | head -1
[ -f "$here/GLIBC_NEEDED" ] && echo "binaries need $(cat "$here/GLIBC_NEEDED") or later"
if command -v nvidia-smi >/dev/null; then
	nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv
else
	echo "no nvidia-smi"
fi

# Python site directories where pip puts CUDA libraries.
pydirs() {
	python3 - <<'PY' 2>/dev/null
import os, site, sys
ds = []
for f in (getattr(site, "getsitepackages", None), getattr(site, "getusersitepackages", None)):
    try:
        r = f() if f else []
        ds += [r] if isinstance(r, str) else list(r)
    except Exception:
        pass
ds += [p for p in sys.path if p.endswith("-packages")]
seen = set()
for d in ds:
    for sub in ("nvidia/cuda_runtime/lib", "nvidia/nccl/lib", "torch/lib"):
        p = os.path.join(d, sub)
        if os.path.isdir(p) and p not in seen:
            seen.add(p)
            print(p)
PY
}

# find_lib NAME...: the first existing library among NAMEs, looked up in the
# loader cache, the usual CUDA directories and pip's directories.
find_lib() {
	local dirs d n
	dirs="$(pydirs) ${CUDA_HOME:-/usr/local/cuda}/lib64 /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64"
	for n in "$@"; do
		d=$(ldconfig -p 2>/dev/null | awk -v n="$n" '$1 == n {print $NF; exit}')
		[ -n "$d" ] && { echo "$d"; return; }
		for d in $dirs; do
			for f in "$d"/$n; do
				[ -e "$f" ] && { echo "$f"; return; }
			done
		done
	done
}

step "libraries"
: "${GDIST_CUDART_PATH:=$(find_lib libcudart.so.12 libcudart.so libcudart.so.11.0 'libcudart-*.so*')}"
: "${GDIST_NCCL_PATH:=$(find_lib libnccl.so.2 libnccl.so)}"
[ -n "$GDIST_CUDART_PATH" ] && export GDIST_CUDART_PATH || unset GDIST_CUDART_PATH
[ -n "$GDIST_NCCL_PATH" ] && export GDIST_NCCL_PATH || unset GDIST_NCCL_PATH
echo "GDIST_CUDART_PATH=${GDIST_CUDART_PATH:-(default search)}"
echo "GDIST_NCCL_PATH=${GDIST_NCCL_PATH:-(default search)}"

# run_tests BINARY ARGS...: the tests on the real GPU (GDIST_CUDA_TEST=real:
# no fake); fails when they skip for want of a GPU.
run_tests() {
	local bin=$1
	shift
	step "$bin $*"
	(cd "$here" && GDIST_CUDA_TEST=real "./$bin" -test.v -test.count=1 "$@") 2>&1 | tee "$RESULTS/$bin.log" |
		grep -E '^(=== RUN|\s*--- (PASS|FAIL|SKIP)|PASS|FAIL|ok|panic)|no CUDA|_test\.go:[0-9]+:' | grep -v '^=== RUN'
	local rc=${PIPESTATUS[0]}
	if grep -q -- '--- SKIP: TestRealGPU' "$RESULTS/$bin.log"; then
		note "$bin: SKIPPED, no GPU seen: $(grep -m1 'no CUDA' "$RESULTS/$bin.log")" 1
	elif [ "$rc" = 0 ]; then
		note "$bin: PASS ($(grep -c -- '--- PASS' "$RESULTS/$bin.log") passed, $(grep -c -- '--- SKIP' "$RESULTS/$bin.log") skipped)"
	else
		note "$bin: FAIL (exit $rc, see $RESULTS/$bin.log)" 1
	fi
}

run_tests cuda.test
run_tests nccl.test
run_tests staging.test
if command -v gcc >/dev/null; then
	# The same suites against the fake CUDA too, where a compiler is at hand.
	step "nccl.test against the fake (GDIST_CUDA_TEST=fake)"
	if (cd "$here" && GDIST_CUDA_TEST=fake ./nccl.test -test.short -test.count=1) >"$RESULTS/nccl.fake.log" 2>&1; then
		note "nccl.test (fake CUDA): PASS"
	else
		note "nccl.test (fake CUDA): FAIL (see $RESULTS/nccl.fake.log)" 1
	fi
fi

step "commbench -backend nccl -np $NP"
"$here/commbench" -backend nccl -np "$NP" -ops all_reduce -sizes "$SIZES" -json >"$RESULTS/commbench_nccl_all_reduce.jsonl" 2>"$RESULTS/commbench_nccl.err"
rc=$?
"$here/commbench" -backend nccl -np "$NP" -ops all -sizes 4K,1M,64M -json >"$RESULTS/commbench_nccl_all.jsonl" 2>>"$RESULTS/commbench_nccl.err"
rc2=$?
cat "$RESULTS/commbench_nccl_all_reduce.jsonl" "$RESULTS/commbench_nccl_all.jsonl"
tail -5 "$RESULTS/commbench_nccl.err"
if [ $rc = 0 ] && [ $rc2 = 0 ]; then note "commbench nccl: ok"; else note "commbench nccl: FAIL (exit $rc/$rc2)" 1; fi

step "commbench -backend tcp -device -np 2 (host staging, two ranks on one GPU)"
"$here/commbench" -backend tcp -device -np 2 -ops all_reduce,all_gather,sendrecv -sizes 4K,1M,64M -json \
	>"$RESULTS/commbench_tcp_device.jsonl" 2>"$RESULTS/commbench_tcp_device.err"
rc=$?
cat "$RESULTS/commbench_tcp_device.jsonl"
if [ $rc = 0 ]; then note "commbench tcp+device: ok"; else note "commbench tcp+device: FAIL (exit $rc)" 1; fi

step "torch.distributed NCCL (PyTorch peer), $NP rank(s)"
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	if [ "$NP" = 1 ]; then
		torch_run=(python3 "$here/torch_nccl_bench.py")
	else
		torch_run=(python3 -m torch.distributed.run --nproc-per-node "$NP" "$here/torch_nccl_bench.py")
	fi
	"${torch_run[@]}" --ops all_reduce --sizes "$SIZES" --json >"$RESULTS/torch_nccl_all_reduce.jsonl" 2>"$RESULTS/torch.err"
	rc=$?
	"${torch_run[@]}" --ops all_reduce --sizes "$SIZES" --json --overlap >"$RESULTS/torch_nccl_all_reduce_overlap.jsonl" 2>>"$RESULTS/torch.err"
	"${torch_run[@]}" --ops all --sizes 4K,1M,64M --json >"$RESULTS/torch_nccl_all.jsonl" 2>>"$RESULTS/torch.err"
	cat "$RESULTS"/torch_nccl_*.jsonl
	tail -3 "$RESULTS/torch.err"
	if [ $rc = 0 ]; then note "torch nccl: ok"; else note "torch nccl: FAIL (exit $rc)" 1; fi
else
	note "torch nccl: skipped (no PyTorch with CUDA)"
fi

step "all_reduce, gdist nccl vs torch.distributed nccl (blocking iterations, time per op)"
python3 - "$RESULTS" <<'PY'
import json, os, sys
res = sys.argv[1]
def rows(name):
    out = {}
    try:
        for line in open(os.path.join(res, name)):
            if line.startswith("{"):
                r = json.loads(line)
                out[(r["op"], r["bytes"])] = r
    except OSError:
        pass
    return out
g = rows("commbench_nccl_all_reduce.jsonl"); g.update(rows("commbench_nccl_all.jsonl"))
t = rows("torch_nccl_all_reduce.jsonl"); t.update(rows("torch_nccl_all.jsonl"))
o = rows("torch_nccl_all_reduce_overlap.jsonl")
print(f"{'op':<15}{'bytes':>12}{'gdist us':>11}{'torch us':>11}{'gdist/torch':>12}{'gdist algbw':>12}{'torch algbw':>12}{'torch ovl us':>13}")
for key in sorted(g, key=lambda k: (k[0] != "all_reduce", k[0], k[1])):
    a, b, c = g[key], t.get(key), o.get(key)
    bt = f"{b['time_us']:11.1f}" if b else f"{'-':>11}"
    ratio = f"{a['time_us'] / b['time_us']:12.2f}" if b and b["time_us"] else f"{'-':>12}"
    bb = f"{b['algbw_gbs']:12.2f}" if b else f"{'-':>12}"
    ct = f"{c['time_us']:13.1f}" if c else f"{'-':>13}"
    ok = "" if a.get("correct") and (not b or b.get("correct")) else "  WRONG RESULT"
    print(f"{key[0]:<15}{key[1]:>12}{a['time_us']:11.1f}{bt}{ratio}{a['algbw_gbs']:12.2f}{bb}{ct}{ok}")
PY

step "summary"
printf '%s\n' "${summary[@]}"
echo "results in $RESULTS"
exit $fail
