#!/usr/bin/env bash
# GPU verification of gdist's CUDA/NCCL path: one command, on a machine with
# one or more NVIDIA GPUs, that needs no Go and no compiler there. Build the
# bundle first on any Linux amd64 machine with Go (benchmarks/gpu/build.sh,
# which writes bin/gpu and bin/gpu.tar.xz; carry either), then, from the
# repository's root on the GPU machine:
#
#   benchmarks/gpu/verify.sh                 # results in $OUT (else bin/gpu/results)
#   BUDGET=300 benchmarks/gpu/verify.sh      # seconds for all steps (default 420)
#   STEPS="inventory nccl kill" benchmarks/gpu/verify.sh   # only these steps
#
# Every step runs under its own timeout, in order of value (the order
# below); a step whose usual time no longer fits in what is left of
# BUDGET is skipped, not started. Nothing changes GPU settings. Steps:
#
#   inventory   nvidia-smi, driver, compute mode; every libcudart, libnccl,
#               libcublas, libnvrtc found and where; what gdist's loaders
#               pick by themselves
#   cuda        gpu/cuda's tests on the real device (GDIST_CUDA_TEST=real)
#   kernels     gpu/cublas's, gpu/rtc's, gpu/kernels', gpu/gemm's and
#               gpu/devmodel's tests on the device: cuBLAS GEMMs,
#               NVRTC-compiled kernels, every device layer against the
#               CPU path, the products' precisions and bf16 casts, whole
#               zoo models trained and evaluated there against the CPU
#               path (streams, the evaluation plan, SyncBN over NCCL);
#               gpu/kernels' launch audit into audit.md
#   gpt         train -device cuda -model gpt-L12-D768-H12-T1024 (GPT-2
#               small's shape; GPT_MODEL, GPT_BATCH=8, GPT_STEPS=20; the
#               peer's attention GPT_ATTN=sdpa, or mha) at fp32
#               and, when train has -precision, bf16 (GPT_PRECISIONS), each
#               right before PyTorch eager on the same model, batch and
#               precision: tokens/s, peak memory, MFU, the ratio; fp32's
#               and bf16's variants (GPT_FP32_VARIANTS="fused",
#               GPT_BF16_CASTS="cublas nocache headscopy fused")
#               against the default run's losses and rate;
#               then a short run of each precision with the device
#               profile (GDIST_DEVICE_PROFILE: device time by layer kind)
#               beside the launch audit's prediction per kind
#   bf16bench   gpu/gemm's BenchmarkBF16Step: a GPT-2-small layer's
#               products in fp32 and bf16 (cast kernel without and with
#               the weight cache, rounding inside cuBLAS): TFLOP/s
#   device      train -device cuda (the model on the GPU) equals -device cpu
#               (mlp, cnn, cnn-bn), and its samples/s next to PyTorch eager's
#               on the same model, batch and GPU (benchmarks/peers/
#               torch_gpu_train.py)
#   strategies  the device strategies, each against its reference (1e-4):
#               2 NCCL ranks sharing the GPU at batch B == 1 rank at 2B
#               (cuda and cpu); DDP's overlapped small buckets ==
#               -no-overlap; SyncBN over NCCL on the device == the host
#               hook and == 1 rank at 2B on the CPU (cnn-bn, ddp and
#               zero3); zero1-3 == ddp; a 2-stage pipeline == the
#               unsplit model on the CPU; ddp and zero3 saved on cuda,
#               resumed on the CPU (mlp, cnn; STRAT_MODELS, STRAT_SIZE)
#   nccl        comm/nccl's tests on real NCCL
#   staging     comm/staging's tests (host backends with device buffers)
#   ncu         Nsight Compute (if there) over a few dozen kernels of a
#               gpt training step (NCU_SKIP, NCU_COUNT): each kernel's time
#               and its compute and memory throughput against the GPU's
#   ranks2      two NCCL ranks (processes) on one GPU through the
#               conformance checks (ncclcheck; each process its own NCCL host)
#   kill        kill -9 of one of two ranks mid-all-reduce: the other fails
#               naming it (and says whether the heartbeat, a notice or
#               ncclCommGetAsyncError caught it)
#   sanitizer   compute-sanitizer (memcheck) over one short GPU test
#   train       train -backend nccl -nproc 2 on the GPU(s) equals -backend shm
#   bench       commbench -backend nccl (1 and 2 ranks; BENCH_NP="1 2")
#               next to torch.distributed's NCCL on the same GPU, and a table
#
# Under $OUT: summary.txt (one line per step: PASS/FAIL/SKIP and why),
# inventory.txt, results.jsonl (one JSON row per step and per benchmark
# row), bench.txt (the side-by-side table), train_bench.txt (gdist's
# training against PyTorch's: rates, step times, memory, MFU),
# bf16_casts.txt (the variants: bf16's cast choices, fp32 and bf16 with
# the fused attention, against the default run),
# bf16bench.txt (BenchmarkBF16Step), audit.md (gpu/kernels' launch
# audit), profile_vs_audit.txt (each kind's measured device time beside
# the audit's), strategies.txt (the strategies step's comparisons, a
# line each), profile.<precision>.json (the gpt's device profile), ncu.txt,
# logs.tar.gz (every step's log, each capped). The exit status is non-zero
# if a step failed.
#
# DRY=1 runs the same steps against the fake CUDA and NCCL (gpu/cudafake,
# whose library build.sh compiles into the bundle) on a machine without a
# GPU: `DRY=1 benchmarks/gpu/verify.sh`; the test benchmarks/gpu's
# TestVerifyDryRun does this in CI.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
B=${BUNDLE:-$root/bin/gpu}
if [ ! -x "$B/cuda.test" ] && [ -f "$B.tar.xz" ]; then
	tar -C "$(dirname "$B")" -xJf "$B.tar.xz" || exit 2
fi
if [ ! -x "$B/cuda.test" ]; then
	echo "verify.sh: no bundle in $B; run benchmarks/gpu/build.sh first (here, with Go), then carry bin/gpu" >&2
	exit 2
fi
OUT=${OUT:-$B/results}
BUDGET=${BUDGET:-420}
DRY=${DRY:-0}
STEPS=${STEPS:-inventory cuda kernels gpt bf16bench device strategies nccl staging ncu ranks2 kill sanitizer train bench}
LOGCAP=${LOGCAP:-400000} # bytes kept of each log (head and tail)
mkdir -p "$OUT"
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/gdist-verify.XXXXXX")
t0=$(date +%s)
: >"$OUT/summary.txt"
: >"$OUT/results.jsonl"
failed=0

left() { echo $((BUDGET - ($(date +%s) - t0))); }
now() { date -u +%Y-%m-%dT%H:%M:%SZ; }
json_str() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1" 2>/dev/null || printf '"%s"' "$(printf '%s' "$1" | tr -d '"\\\n' | head -c 300)"; }

# record NAME STATUS SECONDS DETAIL: one summary line and one JSON row.
record() {
	printf '%-5s %-10s %4ss  %s\n' "$2" "$1" "$3" "$4" | tee -a "$OUT/summary.txt"
	printf '{"step":"%s","status":"%s","seconds":%s,"detail":%s,"time":"%s","dry":%s}\n' \
		"$1" "$2" "$3" "$(json_str "$4")" "$(now)" "$([ "$DRY" = 1 ] && echo true || echo false)" >>"$OUT/results.jsonl"
	[ "$2" = FAIL ] && failed=1
	return 0
}

# step NAME NEED LIMIT FUNC: runs FUNC (which writes $LOGS/NAME.log and
# sets DETAIL; its status says PASS or FAIL) under a timeout of LIMIT
# seconds, capped by what is left of BUDGET; skips it when less than NEED
# seconds are left.
step() {
	local name=$1 need=$2 limit=$3 fn=$4 l rc s
	case " $STEPS " in
	*" $name "*) ;;
	*)
		record "$name" SKIP 0 "not in STEPS"
		return
		;;
	esac
	l=$(left)
	if [ "$l" -lt "$need" ]; then
		record "$name" SKIP 0 "not started: ${l}s of the budget left, it needs about ${need}s"
		return
	fi
	[ "$limit" -gt "$l" ] && limit=$l
	echo "=== $name (limit ${limit}s, ${l}s left) $(now)"
	DETAIL=""
	s=$(date +%s)
	STEP_LIMIT=$limit
	STEP_END=$((s + limit))
	"$fn" "$LOGS/$name.log" >"$LOGS/$name.detail" 2>>"$LOGS/$name.log"
	rc=$?
	DETAIL=$(tail -1 "$LOGS/$name.detail")
	local took=$(($(date +%s) - s))
	if [ "$rc" = 0 ]; then
		record "$name" PASS "$took" "$DETAIL"
	elif [ "$rc" = 77 ]; then
		record "$name" SKIP "$took" "$DETAIL"
	elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
		record "$name" FAIL "$took" "timed out after ${limit}s; $DETAIL"
	else
		record "$name" FAIL "$took" "exit $rc; $DETAIL"
	fi
}

# limited SECONDS [VAR=value...] CMD...: the command under timeout (its
# process group killed at the end, launched ranks included), with the
# variables set.
limited() {
	local t=$1
	shift
	[ "$t" -gt 0 ] || { echo "limited: no time left in the step for $*" >&2; return 124; }
	timeout -k 5 "$t" env "$@"
}

# rest: seconds left in the current step.
rest() { echo $((STEP_END - $(date +%s))); }

# ---------------------------------------------------------------- libraries
# Python's site directories (NVIDIA's pip wheels live there).
sitedirs() {
	python3 - <<'PY' 2>/dev/null
import site, sys
ds = []
try:
    ds += site.getsitepackages()
except Exception:
    pass
ds += [p for p in sys.path if p.endswith("-packages")]
print("\n".join(dict.fromkeys(ds)))
PY
}
SITES=$(sitedirs)
libsearch() { # every file named like $1 in the usual places
	{
		ldconfig -p 2>/dev/null | awk -v n="$1" 'index($1, n) == 1 {print $NF}'
		for d in $SITES /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu /usr/local/nvidia/lib64 /usr/lib64; do
			[ -d "$d" ] && find "$d" -maxdepth 5 -name "$1*" \( -type f -o -type l \) 2>/dev/null
		done
	} | sort -u
}
first_of() { # the first existing path matching one of the globs, in order
	local g f
	for g in "$@"; do
		for f in $g; do
			[ -e "$f" ] && { echo "$f"; return; }
		done
	done
}

if [ "$DRY" = 1 ]; then
	fake=$B/libfakecuda.so
	[ -e "$fake" ] || { echo "verify.sh: DRY=1 needs $fake (build.sh makes it)" >&2; exit 2; }
	export GDIST_CUDART_PATH=$fake GDIST_NCCL_PATH=$fake FAKE_CUDA_DEVICES=1
	export GDIST_CUBLAS_PATH=$fake GDIST_NVRTC_PATH=$fake GDIST_LIBCUDA_PATH=$fake
	export FAKE_NCCL_PROCESSES=1 FAKE_NCCL_DIR=$LOGS/fakenccl
	mkdir -p "$FAKE_NCCL_DIR"
	smi() { echo "(dry run: the fake CUDA, 1 device)"; }
else
	smi() { nvidia-smi "$@"; }
	cudart_all=$(libsearch libcudart.so)
	nccl_all=$(libsearch libnccl.so)
	# Prefer the runtime that matches the newest driver: 13, then 12.
	: "${GDIST_CUDART_PATH:=$(first_of $(echo "$cudart_all" | grep 'so\.13') $(echo "$cudart_all" | grep 'so\.12') $(echo "$cudart_all" | head -1))}"
	: "${GDIST_NCCL_PATH:=$(echo "$nccl_all" | grep 'so\.2' | head -1)}"
	[ -n "$GDIST_CUDART_PATH" ] && export GDIST_CUDART_PATH || unset GDIST_CUDART_PATH
	[ -n "$GDIST_NCCL_PATH" ] && export GDIST_NCCL_PATH || unset GDIST_NCCL_PATH
	# cuBLAS and NVRTC (the kernels step): beside the chosen runtime (one
	# wheel's CUDA), else the newest found.
	for v in CUBLAS:libcublas.so NVRTC:libnvrtc.so; do
		n=GDIST_${v%%:*}_PATH
		[ -n "${!n:-}" ] && continue
		all=$(libsearch "${v#*:}")
		pick=""
		[ -n "${GDIST_CUDART_PATH:-}" ] && pick=$(echo "$all" | grep -F "$(dirname "$GDIST_CUDART_PATH")/" | grep -E 'so\.[0-9]+$' | head -1)
		[ -n "$pick" ] || pick=$(first_of $(echo "$all" | grep -E 'so\.13$') $(echo "$all" | grep -E 'so\.12$') $(echo "$all" | grep -E 'so\.[0-9.]+$' | head -1))
		[ -n "$pick" ] && export "$n=$pick"
	done
fi
export GDIST_CUDA_TEST=real NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# The kernels train's processes compile with NVRTC go to one disk cache
# for the run (gpu/rtc's GDIST_KERNEL_CACHE), so each is compiled once, not
# once a process; the package tests (gotest) compile theirs afresh.
export GDIST_KERNEL_CACHE=${GDIST_KERNEL_CACHE:-$LOGS/kernel-cache}

# ---------------------------------------------------------------- steps
inventory() {
	{
		echo "# gdist GPU verification, $(now), $([ "$DRY" = 1 ] && echo 'DRY RUN on the fake' || echo 'real GPU')"
		echo "## machine"; uname -srm; ldd --version 2>&1 | head -1; nproc
		[ -f "$B/GLIBC_NEEDED" ] && echo "bundle needs $(cat "$B/GLIBC_NEEDED") or later"
		[ -f "$B/BUILD_INFO" ] && cat "$B/BUILD_INFO"
		echo "## nvidia-smi"
		smi --query-gpu=index,name,driver_version,memory.total,compute_mode,pci.bus_id,persistence_mode,mig.mode.current --format=csv 2>&1
		smi -L 2>&1
		smi topo -m 2>&1 | head -20
		echo "## environment"; env | grep -E '^(CUDA|NVIDIA|NCCL|VIRTUAL_ENV|CONDA|LD_LIBRARY_PATH)' | sort
		echo "## python"; command -v python3; python3 -c 'import sys; print(sys.version.split()[0], sys.prefix)' 2>&1
		echo "## site dirs"; echo "$SITES"
		echo "## libraries found"
		for n in libcudart.so libnccl.so libcublas.so libcublasLt.so libnvrtc.so libcuda.so; do
			echo "- $n:"; libsearch "$n" | sed 's/^/    /'
		done
		echo "## compute-sanitizer, nvcc"
		command -v compute-sanitizer nvcc 2>&1; nvcc --version 2>&1 | tail -2
		echo "## chosen: GDIST_CUDART_PATH=${GDIST_CUDART_PATH:-} GDIST_NCCL_PATH=${GDIST_NCCL_PATH:-}"
		echo "## gdist, libraries as given"
		"$B/ncclcheck" -mode info 2>&1
		echo "## gdist, libraries found by its own search (GDIST_*_PATH unset, VIRTUAL_ENV=${VIRTUAL_ENV:-unset})"
		if [ "$DRY" = 1 ]; then echo "(dry run: skipped)"; else
			env -u GDIST_CUDART_PATH -u GDIST_NCCL_PATH "$B/ncclcheck" -mode info 2>&1
		fi
	} >"$OUT/inventory.txt" 2>&1
	cat "$OUT/inventory.txt" >"$1"
	if [ "$DRY" = 1 ]; then
		echo "dry run"
	else
		smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader 2>&1 | head -1
	fi
	grep -q '^cuda: ok' "$OUT/inventory.txt" || { echo "gdist sees no CUDA device: $(grep -m1 '^cuda:' "$OUT/inventory.txt")"; return 1; }
	echo "$(grep -m1 '^cuda: ok' "$OUT/inventory.txt" | cut -c10-200); $(grep -m1 '^nccl:' "$OUT/inventory.txt" | cut -c1-120)"
}

# gotest PKGDIR BINARY [ARGS]: a test binary run in its package's directory
# (tests read files beside them), verbose; the detail counts the results and
# names the failures.
gotest() {
	local log=$1 dir=$2 bin=$3
	shift 3
	(cd "$root/$dir" && limited "$STEP_LIMIT" -u GDIST_KERNEL_CACHE "$B/$bin" -test.v -test.count=1 -test.timeout "$((STEP_LIMIT - 5))s" "$@") >>"$log" 2>&1
	local rc=$?
	local p f s
	p=$(grep -c -- '--- PASS' "$log")
	f=$(grep -- '--- FAIL' "$log" | awk '{print $3}' | tr '\n' ' ')
	s=$(grep -c -- '--- SKIP' "$log")
	if [ "$DRY" != 1 ] && grep -q -- '--- SKIP: TestRealGPU' "$log"; then
		echo "the tests saw no GPU: $(grep -m1 -A1 -- '--- SKIP: TestRealGPU' "$log" | tail -1 | cut -c1-200)"
		return 1
	fi
	echo "$p passed, $s skipped${f:+, FAILED: $f}"
	[ "$p" -gt 0 ] || return 1
	return $rc
}
t_cuda() { gotest "$1" gpu/cuda cuda.test; }
# cuBLAS, NVRTC-compiled kernels, the device layers, the products'
# precisions and tiled kernel (gpu/gemm) and whole models
# placed on the device (gpu/devmodel), each
# package's tests in its directory, within what is left of the step.
# gpu/kernels' TestAudit (no device needed) writes its launch audit to
# $OUT/audit.md: the gpt step puts its per-kind prediction beside the
# measured profile.
t_kernels() {
	local rc=0 out="" p d t1
	for p in cublas rtc kernels gemm devmodel; do
		t1=$(date +%s)
		d=$(STEP_LIMIT=$(rest) GDIST_KERNEL_AUDIT="$OUT/audit.md" gotest "$1.$p" "gpu/$p" "$p.test") || rc=1
		cat "$1.$p" >>"$1"
		rm -f "$1.$p"
		out="$out$p: $d ($(($(date +%s) - t1)) s); "
	done
	echo "${out%; } (cuBLAS ${GDIST_CUBLAS_PATH:-searched}, NVRTC ${GDIST_NVRTC_PATH:-searched})"
	return $rc
}
t_nccl() { gotest "$1" comm/nccl nccl.test -test.short; }

# bf16bench: gpu/gemm's BenchmarkBF16Step, the products of one training
# step of a GPT-2-small layer (the MLP's first Linear at 8192 rows, and
# attention's P V with its dV, whole and block-causal) in fp32 and in
# bf16 three ways: the cast
# kernel without and with the weight cache, and the fp32 operands
# rounded inside cuBLAS (GDIST_BF16_CAST=cublas); TFLOP/s and cast GB/s,
# the median of BF16_COUNT (3) runs of BF16_BENCHTIME (100x) each, in
# bf16bench.txt. The dry run: the fake's tiny sizes, once.
t_bf16bench() {
	local log=$1 bt=${BF16_BENCHTIME:-100x} n=${BF16_COUNT:-3} mode=()
	# The dry run: the test binary's own fake (GDIST_CUDA_TEST=fake, its
	# tiny sizes); against the bundle's fake library as if real, it would
	# emulate GPT-2 small's products thread by thread.
	[ "$DRY" = 1 ] && bt=2x n=1 mode=(GDIST_CUDA_TEST=fake)
	(cd "$root/gpu/gemm" && limited "$STEP_LIMIT" -u GDIST_KERNEL_CACHE -u GDIST_BF16_CAST -u GDIST_AUTOCAST_CACHE "${mode[@]}" "$B/gemm.test" \
		-test.run '^$' -test.bench 'BF16Step' -test.benchtime "$bt" -test.count "$n" -test.timeout "$((STEP_LIMIT - 5))s") >"$LOGS/bf16bench.txt" 2>&1
	local rc=$?
	cat "$LOGS/bf16bench.txt" >>"$log"
	local d
	d=$(python3 "$root/benchmarks/gpu/trainbench.py" gemmbench "$LOGS/bf16bench.txt" --results "$OUT/results.jsonl" --table "$OUT/bf16bench.txt" $(dry_flag) 2>>"$log")
	local r=$?
	cat "$OUT/bf16bench.txt" >>"$log" 2>/dev/null
	echo "$d$([ $rc = 0 ] || echo " (gemm.test exited $rc)")"
	[ $rc = 0 ] && [ $r = 0 ]
}
t_staging() { gotest "$1" comm/staging staging.test -test.short; }

# gpus: the number of GPUs (1 in a dry run).
gpus() {
	if [ "$DRY" = 1 ]; then echo 1; else smi -L 2>/dev/null | grep -c '^GPU'; fi
}

# Two ranks of one job on one GPU: each process poses as its own NCCL host.
share_env() {
	if [ "$DRY" = 1 ]; then
		echo GDIST_NCCL_SHARE_GPU=1
	else
		echo GDIST_NCCL_SHARE_GPU=1 NCCL_SOCKET_IFNAME=lo
	fi
}

t_ranks2() {
	limited "$(rest)" $(share_env) NCCL_DEBUG=INFO "$B/ncclcheck" -np 2 -timeout "$((STEP_LIMIT - 5))s" -op-timeout 30s >"$1" 2>&1
	local rc=$?
	local n
	n=$(grep -c 'rank [0-9]* passed' "$1")
	echo "$n of 2 ranks passed the conformance checks$(grep -m1 'failed:' "$1" | cut -c1-300 | sed 's/^/; /')"
	[ "$rc" = 0 ] && [ "$n" = 2 ]
}

# kill -9 of rank 1 while both all-reduce; rank 0 must fail naming rank 1.
t_kill() {
	local log=$1 port=$((29000 + RANDOM % 1000)) pids=() r
	for r in 0 1; do
		env $(share_env) RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
			GDIST_TOKEN=verify-kill NCCL_HOSTID=gdist-verify-$r \
			"$B/ncclcheck" -mode loop -peer-timeout 2s -timeout 60s >"$LOGS/kill.rank$r" 2>&1 &
		pids+=($!)
	done
	local deadline=$(($(date +%s) + STEP_LIMIT - 25))
	until grep -q 'ready rank' "$LOGS/kill.rank0" && grep -q 'ready rank' "$LOGS/kill.rank1"; do
		if [ "$(date +%s)" -gt "$deadline" ] || ! kill -0 "${pids[0]}" 2>/dev/null || ! kill -0 "${pids[1]}" 2>/dev/null; then
			kill -9 "${pids[@]}" 2>/dev/null
			cat "$LOGS"/kill.rank* >>"$log"
			echo "the ranks did not start all-reducing: $(grep -h -m1 'failed' "$LOGS"/kill.rank* | cut -c1-300)"
			return 1
		fi
		sleep 0.2
	done
	sleep 1
	local k0
	k0=$(($(date +%s%N) / 1000000))
	kill -9 "${pids[1]}"
	local waited=0
	while kill -0 "${pids[0]}" 2>/dev/null && [ $waited -lt 200 ]; do sleep 0.1; waited=$((waited + 1)); done
	local exited=$(($(date +%s%N) / 1000000 - k0))
	kill -9 "${pids[0]}" 2>/dev/null
	wait "${pids[0]}" 2>/dev/null
	{ echo "--- rank 0"; cat "$LOGS/kill.rank0"; echo "--- rank 1 (killed)"; cat "$LOGS/kill.rank1"; } >>"$log"
	local by at ms="?"
	by=$(grep -m1 '^caught-by:' "$LOGS/kill.rank0" | cut -d' ' -f2)
	at=$(grep -m1 '^failed-at-ms:' "$LOGS/kill.rank0" | cut -d' ' -f2)
	[ -n "$at" ] && ms=$((at - k0))
	if [ $waited -ge 200 ]; then
		echo "rank 0 still running 20 s after rank 1 was killed"
		return 1
	fi
	if grep -q '^lost rank 1' "$LOGS/kill.rank0"; then
		echo "rank 0 failed ${ms} ms after the kill, naming rank 1 (caught by: ${by:-?}; peer timeout 2 s; its process exited after ${exited} ms)"
		return 0
	fi
	echo "rank 0 failed ${ms} ms (exited ${exited} ms) after the kill without naming rank 1 (caught by: ${by:-?}): $(grep -m1 'failed:' "$LOGS/kill.rank0" | cut -c1-300)"
	return 1
}

# train -backend nccl -nproc 2 against -backend shm: same steps, eval loss
# equal to float32 rounding (NCCL's avg pre-multiplies).
# same_eval A B TOL KEY WANT: whether the last JSON summaries of two train
# runs (files A and B) reached the same eval_loss and train_loss within
# TOL relative (or 2^-23 absolute, float32's resolution near a loss of 0), in
# as many steps, A's KEY being WANT; prints one line (with MISMATCH if not)
# and the samples/s and peak device memory of both.
same_eval() {
	python3 - "$@" <<'PY'
import json, sys
a_path, b_path, tol, key, want = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5]
def last(p):
    s = None
    for line in open(p):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            if "eval_loss" in r and r.get("event", "summary") == "summary":
                s = r
    return s
a, b = last(a_path), last(b_path)
if not a or not b:
    print("no summary (%s %s, other %s)" % (want, bool(a), bool(b))); sys.exit(1)
d = abs(a["eval_loss"] - b["eval_loss"])
# A loss near 0 is -log(p) with p near 1, which float32 resolves to 2^-24
# (about 6e-8 a sample): below 1e-3 the relative tolerance would ask for
# more bits than the probabilities have, so the difference may also be
# 2^-23 absolute; the training loss (far from 0) is held to TOL as well.
dt = abs(a.get("train_loss", 0) - b.get("train_loss", 0))
ok = (str(a.get(key, "")).startswith(want) and a.get("steps") == b.get("steps")
      and d <= tol * abs(b["eval_loss"]) + 2**-23 and dt <= tol * abs(b.get("train_loss", 0)) + 2**-23)
extra = ""
if "peak_device_bytes" in a:
    extra = ", %.0f vs %.0f samples/s, peak device %.1f MB" % (a.get("samples_per_sec", 0), b.get("samples_per_sec", 0), a["peak_device_bytes"] / 1e6)
print("eval_loss %s %.9g other %.9g (diff %.2g, steps %s/%s%s)%s" % (want, a["eval_loss"], b["eval_loss"], d, a.get("steps"), b.get("steps"), extra, "" if ok else " MISMATCH"))
sys.exit(0 if ok else 1)
PY
}

# train_pairs LOG KEY WANT TOL MODELS A_ENV A_FLAGS B_FLAGS COMMON...: for
# each model, train with A_ENV (VAR=value words) and A_FLAGS, then with
# B_FLAGS (both with the COMMON flags), and compare the two with same_eval
# (A's summary KEY must be WANT; eval loss within TOL).
train_pairs() {
	local log=$1 key=$2 want=$3 tol=$4 models=$5 aenv=$6 aflags=$7 bflags=$8
	shift 8
	local m rc=0 out="" a b
	for m in $models; do
		a=$LOGS/pair.$key.$m.$want b=$LOGS/pair.$key.$m.other
		echo "--- $m $aflags" >>"$log"
		limited "$(($(rest) / 2))" $aenv "$B/train" -model "$m" $aflags "$@" >"$a" 2>>"$log"
		local r1=$?
		echo "--- $m $bflags" >>"$log"
		limited "$(rest)" "$B/train" -model "$m" $bflags "$@" >"$b" 2>>"$log"
		local r2=$?
		cat "$a" "$b" >>"$log"
		local cmp
		cmp=$(same_eval "$a" "$b" "$tol" "$key" "$want")
		local r3=$?
		out="$out$m: $cmp (exit $r1/$r2); "
		[ $r1 = 0 ] && [ $r2 = 0 ] && [ $r3 = 0 ] || rc=1
		if [ "$(rest)" -lt 30 ]; then out="$out(no time left for the next model)"; break; fi
	done
	echo "$out"
	return $rc
}

# train -device cuda (one rank, the model on the GPU: gpu/devmodel) against
# -device cpu with the same seed and data: eval loss within 1e-4. The fake
# runs the kernels on the CPU, emulating every GPU thread: the dry run
# trains the mlp on a quarter of the data only. Then PyTorch eager on the
# same model, batch (32) and optimizer (SGD, momentum 0.9, lr 0.01) on the
# same GPU, each model's rates compared (trainbench.py; the dry run's
# peer trains on the CPU, if python3 has torch). The step's status is the
# equivalence's; the peers' ratios (or their failure) are in its detail.
t_device() {
	local limit=2048 models="mlp cnn cnn-bn" pdev=cuda psteps=30 pwarm=5
	[ "$DRY" = 1 ] && limit=512 models=mlp pdev=cpu psteps=3 pwarm=1
	local eq rc m peers=""
	eq=$(train_pairs "$1" device cuda 1e-4 "$models" "" "-device cuda" "-device cpu" \
		-nproc 1 -data synthetic -limit $limit -epochs 1 -batch 32 -lr 0.01 -seed 5 -json -progress=false)
	rc=$?
	if torch_ok; then
		for m in $models; do
			[ -s "$LOGS/pair.device.$m.cuda" ] || continue
			if [ "$(rest)" -lt 20 ]; then peers="$peers (no time left for torch)"; break; fi
			echo "--- torch $m" >>"$1"
			limited "$(($(rest) - 10))" "$TPY" "$B/torch_gpu_train.py" --model "$m" --batch 32 --optimizer sgd --lr 0.01 \
				--steps $psteps --warmup $pwarm --device $pdev >"$LOGS/device.torch.$m" 2>>"$1"
			cat "$LOGS/device.torch.$m" >>"$1"
			local c
			c=$(python3 "$root/benchmarks/gpu/trainbench.py" compare "$LOGS/pair.device.$m.cuda" "$LOGS/device.torch.$m" \
				--precision fp32 --gpu "$(gpu_name)" --results "$OUT/results.jsonl" --table "$OUT/train_bench.txt" $(dry_flag) 2>>"$1")
			echo "=== $c" >>"$1"
			peers="$peers $c;"
		done
	else
		peers=" (no python3 with torch: no PyTorch peer)"
	fi
	echo "${eq%; };$peers"
	return $rc
}

# ---------------------------------------------------------------- strategies
# strategies: the device strategies of train (gpu/devmodel under
# train/dp and train/pp) against their references, each pair of runs
# compared by trainbench.py same (eval and train loss, test accuracy,
# median gradient norm within 1e-4 relative: cmd/train's deviceTol; the
# same steps; the fields the summary must report), a line per comparison
# in strategies.txt and a row in results.jsonl:
#   ranks     -device cuda -nproc 2 -backend nccl at batch B (both ranks on
#             the one GPU, each its own NCCL host) == -nproc 1 at 2B on
#             cuda, and == -device cpu at 2B (mlp, cnn)
#   overlap   DDP's bucketed all-reduce overlapping backward (small
#             buckets: -first-bucket-mb 0.05 -bucket-mb 0.2) == the same
#             with -no-overlap, and == the CPU at 2B: a bucket's
#             all-reduce waits on the device for an event recorded on
#             the model's non-blocking stream after its gradients'
#             kernels (cuda.Order), and the update for the last
#             bucket's; a missing wait shows only on a real GPU, which
#             runs the streams at once (mlp, cnn)
#   syncbn    -syncbn over NCCL, the statistics combined on the device
#             (syncbn.Device) == the host hook (-backend shm) and == 1
#             rank at 2B on the CPU; zero3 too (cnn-bn)
#   zero      zero1, zero2, zero3 on cuda (2 ranks, nccl, Adam, clipping)
#             == ddp on cuda; ddp on cuda == ddp on cpu (shm)
#   pipeline  -strategy pipeline -nproc 2 on cuda (host staging; and the
#             mlp over NCCL, device to device) == the unsplit model on
#             the CPU at the same batch (mlp, cnn)
#   resume    ddp and zero3 saved on cuda mid-run (-max-steps), resumed on
#             the CPU == on the CPU throughout (eval loss and accuracy)
# Every process compiles the kernels it uses with NVRTC; the step's
# processes share one kernel cache (GDIST_KERNEL_CACHE, set for the whole
# run below), so only the first compiles each. The dry run: the mlp only
# (the fake emulates each GPU thread of a convolution), 128 samples.
STOL=1e-4
t_strategies() {
	local log=$1 limit=1024 rlimit=1024 models=${STRAT_MODELS:-mlp cnn} B1=16 psteps=40 rc=0 n=0 bad=0 fails="" ovl="" tiny=0
	if [ "${STRAT_SIZE:-$([ "$DRY" = 1 ] && echo tiny)}" = tiny ]; then
		limit=128 rlimit=128 models=${STRAT_MODELS:-mlp} B1=8 psteps=10 tiny=1
	fi
	local B2=$((B1 * 2)) ev m
	ev=$(share_env)
	: >"$OUT/strategies.txt"
	# SGD at lr 0.01: after 32 steps the losses are far from 0 (mlp 1.3,
	# cnn 2.1), where a relative tolerance measures something.
	local common=(-data synthetic -seed 5 -lr 0.01 -lr-schedule cosine -warmup 2 -clip-grad 1 -epochs 1 -limit $limit -json -progress=false)
	local small=(-first-bucket-mb 0.05 -bucket-mb 0.2)
	# s_run NAME ENV FLAGS...: one train run (ENV: VAR=value words), its
	# output in $LOGS/strat.NAME.
	s_run() {
		local name=$1 e=$2
		shift 2
		local f=$LOGS/strat.$name
		if [ "$(rest)" -lt 15 ]; then
			echo "--- $name: no time left in the step" >>"$log"
			: >"$f"
			return 124
		fi
		echo "--- $name: $e train $*" >>"$log"
		local t1=$(date +%s%N)
		limited "$(($(rest) - 10))" $e "$B/train" "$@" >"$f" 2>>"$log"
		local r=$?
		cat "$f" >>"$log"
		echo "(exit $r, $((($(date +%s%N) - t1) / 1000000)) ms)" >>"$log"
	}
	# s_same CHECK A B [trainbench flags...]: the comparison's line and row.
	s_same() {
		local check=$1 a=$LOGS/strat.$2 b=$LOGS/strat.$3 out
		shift 3
		out=$(python3 "$root/benchmarks/gpu/trainbench.py" same "$check" "$a" "$b" --tol $STOL "$@" \
			--results "$OUT/results.jsonl" --table "$OUT/strategies.txt" $(dry_flag) 2>>"$log")
		local r=$?
		echo "=== $out" >>"$log"
		n=$((n + 1))
		case $check in "overlap "*"== -no-overlap") ovl="$ovl ${out%%;*};" ;; esac
		if [ $r != 0 ]; then
			bad=$((bad + 1)) rc=1
			fails="$fails ${out:0:160};"
		fi
	}
	local cuda2=(--expect device=cuda:0 --expect world_size=2)
	# s_overlap M: first (what only a GPU can show), the one-rank run before
	# it filling the kernel cache for the rest.
	s_overlap() {
		local m=$1
		s_run "one.$m" "" -model $m -device cuda -nproc 1 -batch $B2 "${common[@]}"
		s_run "cpu.$m" "" -model $m -device cpu -nproc 1 -batch $B2 "${common[@]}"
		s_run "ovl.$m" "$ev" -model $m -device cuda -nproc 2 -backend nccl -batch $B1 "${small[@]}" "${common[@]}"
		s_run "noovl.$m" "$ev" -model $m -device cuda -nproc 2 -backend nccl -batch $B1 "${small[@]}" -no-overlap "${common[@]}"
		s_same "overlap $m: small buckets == -no-overlap" "ovl.$m" "noovl.$m" "${cuda2[@]}" --expect overlap=true --expect "buckets>1"
		s_same "overlap $m: small buckets == cpu 1 x $B2" "ovl.$m" "cpu.$m"
		s_same "overlap $m: -no-overlap == cpu 1 x $B2" "noovl.$m" "cpu.$m" --expect overlap=false --expect buckets=0
	}
	s_ranks() {
		local m=$1
		s_run "two.$m" "$ev" -model $m -device cuda -nproc 2 -backend nccl -batch $B1 "${common[@]}"
		s_same "ranks $m: 2 x $B1 == 1 x $B2 (cuda)" "two.$m" "one.$m" "${cuda2[@]}" --expect backend=nccl
		s_same "ranks $m: 2 x $B1 cuda == 1 x $B2 cpu" "two.$m" "cpu.$m"
	}
	# s_syncbn: SyncBatchNorm over NCCL on the device (syncbn.Device: the
	# ranks' statistics all-gathered and combined by a kernel, nothing
	# through the host) == the host hook (-backend shm: HostSyncBN) and ==
	# one rank at twice the batch on the CPU (cnn-bn), ddp and zero3 (the
	# parameters gathered unit by unit), as cmd/train's TestDeviceSyncBN;
	# the summaries must say syncbn and no time in the host hook. (That
	# the data can tell, without -syncbn the eval loss differs:
	# TestDeviceSyncBN.) The dry run: 32 samples at batch 4 a rank.
	s_syncbn() {
		local sl=$limit sb=$B1
		[ $tiny = 1 ] && sl=32 sb=4
		local sc=(-model cnn-bn "${common[@]}" -limit $sl)
		s_run sbn.nccl "$ev" -device cuda -nproc 2 -backend nccl -batch $sb -syncbn "${sc[@]}"
		s_run sbn.host "" -device cuda -nproc 2 -backend shm -batch $sb -syncbn "${sc[@]}"
		s_run sbn.cpu "" -device cpu -nproc 1 -batch $((sb * 2)) "${sc[@]}"
		s_run sbn.zero3 "$ev" -device cuda -nproc 2 -backend nccl -strategy zero3 -batch $sb -syncbn "${sc[@]}"
		local sx=(--expect syncbn=true --expect "syncbn_ms_per_step<0.001")
		s_same "syncbn cnn-bn: nccl (device) == shm (host hook)" sbn.nccl sbn.host "${cuda2[@]}" --expect backend=nccl "${sx[@]}"
		s_same "syncbn cnn-bn: 2 x $sb nccl == cpu 1 x $((sb * 2))" sbn.nccl sbn.cpu
		s_same "syncbn cnn-bn: zero3 nccl == cpu 1 x $((sb * 2))" sbn.zero3 sbn.cpu "${cuda2[@]}" --expect strategy=zero3 "${sx[@]}"
	}
	s_pipeline() {
		local m=$1
		s_run "pipe.$m" "" -model $m -device cuda -strategy pipeline -nproc 2 -microbatches 3 -batch $B2 "${common[@]}"
		s_same "pipeline $m: 2 stages cuda == cpu" "pipe.$m" "cpu.$m" "${cuda2[@]}" --expect strategy=pipeline
		if [ $m = mlp ]; then
			s_run "pipenccl.$m" "$ev" -model $m -device cuda -strategy pipeline -nproc 2 -microbatches 3 -backend nccl -batch $B2 "${common[@]}"
			s_same "pipeline $m: over nccl == cpu" "pipenccl.$m" "cpu.$m" "${cuda2[@]}" --expect backend=nccl
		fi
	}
	for m in $models; do s_overlap $m; done
	s_syncbn
	s_ranks mlp
	# ZeRO: Adam (its state sharded) and clipping by the global norm, as
	# TestDeviceZeroMatchesDDP (at lr 1e-4: eval loss 1.3 after 32 steps).
	local zc=(-model mlp -data synthetic -seed 5 -epochs 1 -limit $limit -batch $B1 -nproc 2 -optimizer adam -lr 1e-4 -clip-grad 0.5 -json -progress=false)
	s_run zddp "$ev" -device cuda -backend nccl -strategy ddp "${zc[@]}"
	s_run zcpu "" -device cpu -backend shm -strategy ddp "${zc[@]}"
	s_same "zero: ddp cuda == ddp cpu" zddp zcpu "${cuda2[@]}"
	local z
	for z in zero1 zero2 zero3; do
		s_run "$z" "$ev" -device cuda -backend nccl -strategy $z "${zc[@]}"
		s_same "zero: $z cuda == ddp cuda" "$z" zddp "${cuda2[@]}" --expect strategy=$z
	done
	# Resume across devices: saved on cuda after psteps steps of two
	# epochs, resumed on the CPU; the train loss is the resumed part's.
	local rdir=$LOGS/resume s
	mkdir -p "$rdir"
	for s in ddp zero3; do
		local rc_=(-model mlp -data synthetic -seed 3 -epochs 2 -limit $rlimit -batch $B1 -nproc 2 -strategy $s -optimizer adam -lr 1e-4 -json -progress=false)
		s_run "whole.$s" "" -device cpu -backend shm "${rc_[@]}"
		s_run "half.$s" "$ev" -device cuda -backend nccl -save "$rdir/$s.safetensors" -max-steps $psteps "${rc_[@]}"
		s_run "resumed.$s" "" -device cpu -backend shm -save "$rdir/$s.safetensors" -resume "$rdir/$s.safetensors" "${rc_[@]}"
		s_same "resume $s: cuda -> cpu == cpu" "resumed.$s" "whole.$s" --metrics eval_loss,test_accuracy --expect resumed_step=$psteps --expect device=cpu
	done
	s_pipeline mlp
	for m in $models; do [ $m = mlp ] || { s_ranks $m; s_pipeline $m; }; done
	cat "$OUT/strategies.txt" >>"$log"
	echo "kernel cache $GDIST_KERNEL_CACHE: $(ls "$GDIST_KERNEL_CACHE" 2>/dev/null | wc -l) images" >>"$log"
	echo "$((n - bad)) of $n comparisons within $STOL (ranks, overlap, zero1-3, pipeline, resume: strategies.txt)$([ $bad = 0 ] || echo "; FAILED:${fails%;}");${ovl%;}; kernel cache: $(ls "$GDIST_KERNEL_CACHE" 2>/dev/null | wc -l) images"
	[ $n -gt 0 ] && return $rc
}

# train -backend nccl -nproc 2 (ranks sharing the GPU where it is one)
# against -backend shm: eval loss within 1e-5 (NCCL's avg rounds apart).
t_train() {
	train_pairs "$1" backend nccl 1e-5 "mlp cnn" "$(share_env)" "-backend nccl" "-backend shm" \
		-nproc 2 -data synthetic -limit 2048 -epochs 1 -batch 32 -lr 0.01 -seed 5 -json -progress=false
}

t_bench() {
	# The fake's cross-process collectives take at most 64 MiB.
	local log=$1 sizes=${SIZES:-8,512,4K,64K,1M,16M,64M$([ "$DRY" = 1 ] || echo ,256M)} rc=0
	# Two ranks on one GPU time-slice it (each op waits for both processes'
	# kernels in turn): fewer sizes and iterations there.
	local np
	for np in ${BENCH_NP:-1 2}; do
		local ev="" szs=$sizes it=()
		if [ $np -gt 1 ] && [ "$(gpus)" -lt $np ]; then
			ev=$(share_env)
			szs=4K,1M,64M
			it=(-iters 20)
		fi
		echo "--- commbench nccl np $np" >>"$log"
		limited "$(($(rest) / 6))" $ev "$B/commbench" -backend nccl -np $np -ops all_reduce -sizes "$szs" "${it[@]}" -json \
			>"$LOGS/cb.ar.$np.jsonl" 2>>"$log" || rc=1
		limited "$(($(rest) / 5))" $ev "$B/commbench" -backend nccl -np $np -ops all -sizes 4K,1M,64M "${it[@]}" -json \
			>"$LOGS/cb.all.$np.jsonl" 2>>"$log" || rc=1
		echo "--- torch nccl np $np" >>"$log"
		local tr=(python3 "$B/torch_nccl_bench.py")
		[ $np -gt 1 ] && tr=(python3 -m torch.distributed.run --nproc-per-node $np "$B/torch_nccl_bench.py")
		[ -n "$ev" ] && tr+=(--share-gpu --iters 20)
		if [ "$DRY" = 1 ]; then
			echo "(dry run: no torch)" >>"$log"
		else
			limited "$(($(rest) / 4))" "${tr[@]}" --ops all_reduce --sizes "$szs" --json >"$LOGS/tt.ar.$np.jsonl" 2>>"$log" || rc=1
			limited "$(($(rest) / 3))" "${tr[@]}" --ops all --sizes 4K,1M,64M --json >"$LOGS/tt.all.$np.jsonl" 2>>"$log" || rc=1
		fi
	done
	cat "$LOGS"/cb.*.jsonl "$LOGS"/tt.*.jsonl 2>/dev/null | grep '^{' >>"$log"
	python3 - "$LOGS" "$OUT" <<'PY' 2>>"$log"
import glob, json, os, sys
logs, out = sys.argv[1], sys.argv[2]
def rows(pat):
    d = {}
    for p in sorted(glob.glob(os.path.join(logs, pat))):
        np = p.split(".")[-2]
        for line in open(p):
            if line.startswith("{"):
                r = json.loads(line)
                d[(int(np), r["op"], r["bytes"])] = r
    return d
g, t = rows("cb.*.jsonl"), rows("tt.*.jsonl")
bad, ratios = 0, []
with open(os.path.join(out, "bench.txt"), "w") as f, open(os.path.join(out, "results.jsonl"), "a") as js:
    f.write(f"{'ranks':>5} {'op':<15}{'bytes':>11}{'gdist us':>11}{'torch us':>11}{'gdist/torch':>12}{'gdist busbw':>12}{'torch busbw':>12}\n")
    for key in sorted(g, key=lambda k: (k[0], k[1] != "all_reduce", k[1], k[2])):
        a, b = g[key], t.get(key)
        ok = a.get("correct", True) and (not b or b.get("correct", True))
        bad += not ok
        ratio = a["time_us"] / b["time_us"] if b and b["time_us"] else None
        if ratio and key[1] == "all_reduce" and key[2] in (1 << 20, 1 << 26):
            ratios.append(f"{key[0]}r {key[2] >> 20}M {ratio:.2f}x")
        f.write(f"{key[0]:>5} {key[1]:<15}{key[2]:>11}{a['time_us']:11.1f}" + (f"{b['time_us']:11.1f}" if b else f"{'-':>11}")
                + (f"{ratio:12.2f}" if ratio else f"{'-':>12}") + f"{a.get('busbw_gbs', 0):12.2f}" + (f"{b.get('busbw_gbs', 0):12.2f}" if b else f"{'-':>12}")
                + ("" if ok else "  WRONG RESULT") + "\n")
        js.write(json.dumps({"bench": "nccl", "ranks": key[0], "op": key[1], "bytes": key[2], "gdist_us": a["time_us"],
                             "torch_us": b["time_us"] if b else None, "gdist_busbw_gbs": a.get("busbw_gbs"),
                             "torch_busbw_gbs": b.get("busbw_gbs") if b else None, "correct": ok}) + "\n")
ranks = sorted({k[0] for k in g})
print(f"gdist rows {len(g)} (ranks {ranks}), torch rows {len(t)}, wrong {bad}; all_reduce time gdist/torch: {', '.join(ratios) or 'none'}")
sys.exit(1 if bad or not g else 0)
PY
	local r=$?
	cat "$OUT/bench.txt" >>"$log" 2>/dev/null
	[ $r = 0 ] && [ $rc = 0 ]
}

# ---------------------------------------------------------------- gpt
# TPY: the python that imports torch (TORCH_PYTHON, else the first of
# python3, the GPU machine's venv and Debian's /usr/bin/python3 that does).
TPY=""
torch_ok() {
	local py
	[ -n "$TPY" ] && return 0
	for py in ${TORCH_PYTHON:-python3 /opt/torch/.venv/bin/python3 /usr/bin/python3}; do
		if "$py" -c 'import torch' >/dev/null 2>&1; then
			TPY=$py
			return 0
		fi
	done
	return 1
}
dry_flag() { [ "$DRY" = 1 ] && echo --dry; }
# gpu_name: nvidia-smi's name of GPU 0 (the MFU's peak is looked up by it).
gpu_name() {
	if [ "$DRY" = 1 ]; then echo "fake"; else smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1; fi
}
# train_precision: whether train has -precision (fp32|tf32|bf16). (Not a
# pipe into grep -q: under pipefail, train's exit status after -h, or the
# SIGPIPE grep's early exit may send it, would decide.)
train_precision() {
	local h
	h=$("$B/train" -h 2>&1)
	[[ $h == *"-precision "* ]]
}

# make_corpus DIR T BYTES: a text corpus for the gpt runs (the GPU machine
# has no Go tree, train's default): DIR/train.txt, BYTES of this
# repository's Go files (repeated if short), and DIR/heldout-12.txt, one
# window of T+1 bytes after them. data.LoadText holds out the files whose
# relative path's FNV-1a hash is 0 mod 20 (heldout-12.txt's is, train.txt's
# not): train's evaluations then read one window, not 1024.
make_corpus() {
	[ -s "$1/train.txt" ] && [ "$(stat -c %s "$1/train.txt")" -ge "$3" ] && return 0
	python3 - "$1" "$2" "$3" "$root" <<'PY'
import os, sys
d, t, need, root = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def fnv(s):
    h = 0x811C9DC5
    for c in s.encode():
        h = ((h ^ c) * 0x01000193) & 0xFFFFFFFF
    return h
assert fnv("heldout-12.txt") % 20 == 0 and fnv("train.txt") % 20 != 0
buf = bytearray()
for dp, dns, fns in os.walk(root):
    dns[:] = sorted(x for x in dns if x not in (".git", "bin"))
    for f in sorted(fns):
        if f.endswith(".go"):
            with open(os.path.join(dp, f), "rb") as fh:
                buf += fh.read()
if not buf:
    sys.exit("no .go files below " + root)
text = bytes(buf)
while len(text) < need + t + 1:
    text += bytes(buf)
os.makedirs(d, exist_ok=True)
with open(os.path.join(d, "train.txt"), "wb") as f:
    f.write(text[:need])
with open(os.path.join(d, "heldout-12.txt"), "wb") as f:
    f.write(text[need:need + t + 1])
print("corpus %s: %d bytes, one held-out window of %d" % (d, need, t + 1))
PY
}

# ensure_audit LOG: gpu/kernels' launch audit in $OUT/audit.md (its
# TestAudit needs no device; the kernels step writes it as it runs).
ensure_audit() {
	[ -s "$OUT/audit.md" ] && return 0
	(cd "$root/gpu/kernels" && limited 60 GDIST_KERNEL_AUDIT="$OUT/audit.md" "$B/kernels.test" -test.run '^TestAudit$' -test.count=1) >>"$1" 2>&1 ||
		echo "(the launch audit failed: no prediction from it)" >>"$1"
}

# gpt: train -device cuda on GPT-2 small's shape (gpt-L12-D768-H12-T1024:
# 86.2M parameters with gdist's 256-byte vocabulary) at batch 8 for 20
# steps (train's gpt defaults: AdamW lr 3e-3, weight decay 0.01, clipping
# at 1; -warmup 0), then PyTorch eager (torch_gpu_train.py: the same
# model, batch, optimizer and precision; 5 warm-up steps, 15 timed), for
# fp32 and, when train has -precision, bf16 (autocast). trainbench.py
# compares the two medians, with each side's MFU and peak memory. Then a
# shorter run per precision with GDIST_DEVICE_PROFILE (profile.<p>.json in
# $OUT): where gdist's step spends device time, by layer kind. The dry run
# trains gpt-L1-D32-H2-T16 at batch 2 on the fake, its peer on the CPU.
t_gpt() {
	local log=$1 model=${GPT_MODEL:-gpt-L12-D768-H12-T1024} batch=${GPT_BATCH:-8} steps=${GPT_STEPS:-20}
	local psteps=${GPT_PROFILE_STEPS:-8} pdev=cuda pwarm=5 precs=${GPT_PRECISIONS:-fp32 bf16} casts=${GPT_BF16_CASTS-cublas nocache headscopy fused} fp32v=${GPT_FP32_VARIANTS-fused} note="" rc=0 out="" p walls="" w0
	if [ "$DRY" = 1 ]; then
		model=gpt-L1-D32-H2-T16 batch=2 steps=4 psteps=4 pdev=cpu pwarm=1
	fi
	local pf=1
	if ! train_precision; then
		pf=0 precs=fp32 note=" (train has no -precision: fp32 only)"
	fi
	local t gpu
	t=$(echo "$model" | sed -n 's/^gpt-L[0-9]*-D[0-9]*-H[0-9]*-T\([0-9]*\)$/\1/p')
	[ -n "$t" ] || { echo "GPT_MODEL $model: want gpt-L<l>-D<d>-H<h>-T<t>"; return 1; }
	gpu=$(gpu_name)
	make_corpus "$LOGS/corpus" "$t" $((steps * batch * t * 2 + 65536)) >>"$log" 2>&1 || { echo "could not build the text corpus"; return 1; }
	local havetorch=1
	torch_ok || havetorch=0
	# walled LABEL: the seconds since w0 into the detail's wall times (the
	# next run's budget) and the log.
	walled() {
		walls="$walls $1 $(($(date +%s) - w0))s,"
		echo "(wall: $1 $(($(date +%s) - w0)) s)" >>"$log"
	}
	# gdist_train P STEPS [VAR=value...]: train's command for precision P
	gdist_train() {
		local p=$1 n=$2
		shift 2
		local extra=()
		[ $pf = 1 ] && extra=(-precision "$p")
		limited "$(($(rest) / 2))" "$@" "$B/train" -device cuda -nproc 1 -model "$model" -data "$LOGS/corpus" -batch "$batch" \
			-steps "$n" -warmup 0 -seed 7 -json -progress=false "${extra[@]}"
	}
	# gpt_casts P: after P's pair, each variant of P (GPT_FP32_VARIANTS
	# for fp32, GPT_BF16_CASTS for bf16) trains the same steps: its
	# losses against P's default run's and fp32's (trainbench.py
	# variant: bf16_casts.txt), its rate against the same PyTorch run of
	# P. fused (GDIST_ATTENTION=fused: gpu/kernels' fused causal
	# attention, no T x T probabilities kept, fp32 arithmetic under
	# bf16 too) within 2% at both precisions (other sums, other
	# exponentials), for its speed and peak memory. cublas
	# (GDIST_BF16_CAST=cublas: the fp32 operands rounded inside cuBLAS,
	# not by the cast kernel) within 2%; nocache (GDIST_AUTOCAST_CACHE=0:
	# each weight cast for every product, not once per update: the same
	# bf16 values) within 1e-4, the weight cache's check on the device
	# (a stale copy would train on old weights); headscopy
	# (GDIST_ATTENTION_HEADS=copy: attention's heads copied into
	# matrices and back, strided products, instead of read in place by
	# cublasGemmBatchedEx's pointer arrays) within 2% (cuBLAS's kernels
	# may sum in another order), for its speed.
	gpt_casts() {
		local pv=$1 c ce ctol list=$casts what=GPT_BF16_CASTS
		[ "$pv" = fp32 ] && list=$fp32v what=GPT_FP32_VARIANTS
		for c in $list; do
			case $pv/$c in
			bf16/cublas) ce=GDIST_BF16_CAST=cublas ctol=0.02 ;;
			bf16/nocache) ce=GDIST_AUTOCAST_CACHE=0 ctol=1e-4 ;;
			bf16/headscopy) ce=GDIST_ATTENTION_HEADS=copy ctol=0.02 ;;
			*/fused) ce=GDIST_ATTENTION=fused ctol=0.02 ;;
			*)
				out="$out($what: $c is not one of: $([ "$pv" = fp32 ] && echo fused || echo cublas, nocache, headscopy, fused)); "
				rc=1
				continue
				;;
			esac
			if [ "$(rest)" -lt 30 ]; then out="$out(no time left for $pv+$c); "; break; fi
			local gv=$LOGS/gpt.gdist.$pv.$c vc
			echo "--- gdist $model batch $batch $pv $ce" >>"$log"
			w0=$(date +%s)
			gdist_train "$pv" "$steps" "$ce" >"$gv" 2>>"$log"
			local rv=$?
			walled "gdist $pv+$c"
			cat "$gv" >>"$log"
			vc=$(python3 "$root/benchmarks/gpu/trainbench.py" variant "$pv+$c" "$gv" "$LOGS/gpt.gdist.$pv" "$LOGS/gpt.gdist.fp32" --tol "$ctol" \
				--results "$OUT/results.jsonl" --table "$OUT/bf16_casts.txt" $(dry_flag) 2>>"$log")
			local rv2=$?
			echo "=== $vc" >>"$log"
			out="$out$vc (exit $rv); "
			[ $rv = 0 ] && [ $rv2 = 0 ] || rc=1
			if [ $havetorch = 1 ] && [ -s "$LOGS/gpt.torch.$pv" ]; then
				vc=$(python3 "$root/benchmarks/gpu/trainbench.py" compare "$gv" "$LOGS/gpt.torch.$pv" --precision "$pv" --variant "$c" --gpu "$gpu" \
					--results "$OUT/results.jsonl" --table "$OUT/train_bench.txt" $(dry_flag) 2>>"$log") || rc=1
				echo "=== $vc" >>"$log"
				out="$out$vc; "
			fi
		done
	}
	for p in $precs; do
		local g=$LOGS/gpt.gdist.$p tt=$LOGS/gpt.torch.$p r2=0 r3=0 cmp
		if [ "$(rest)" -lt 30 ]; then out="$out(no time left for $p); "; rc=1; break; fi
		echo "--- gdist $model batch $batch $p" >>"$log"
		w0=$(date +%s)
		gdist_train "$p" "$steps" >"$g" 2>>"$log"
		local r1=$?
		walled "gdist $p"
		cat "$g" >>"$log"
		if [ $havetorch = 1 ]; then
			echo "--- torch $model batch $batch $p" >>"$log"
			w0=$(date +%s)
			limited "$(($(rest) / 2))" "$TPY" "$B/torch_gpu_train.py" --model "$model" --batch "$batch" --precision "$p" --attn "${GPT_ATTN:-sdpa}" \
				--steps $((steps - pwarm)) --warmup $pwarm --profile-steps 3 --device $pdev >"$tt" 2>>"$log"
			r2=$?
			walled "torch $p"
			cat "$tt" >>"$log"
			cmp=$(python3 "$root/benchmarks/gpu/trainbench.py" compare "$g" "$tt" --precision "$p" --gpu "$gpu" \
				--results "$OUT/results.jsonl" --table "$OUT/train_bench.txt" $(dry_flag) 2>>"$log")
			r3=$?
			echo "=== $cmp" >>"$log"
		elif [ "$DRY" = 1 ]; then
			cmp="$p: gdist trained (exit $r1); no python3 with torch here: no peer"
		else
			cmp="$p: no python3 with torch: no PyTorch peer"
			r3=1
		fi
		out="$out$cmp (exit $r1/$r2); "
		[ $r1 = 0 ] && [ $r2 = 0 ] && [ $r3 = 0 ] || rc=1
		[ "$p" = bf16 ] && [ $pf = 1 ] && gpt_casts bf16
		[ "$p" = fp32 ] && gpt_casts fp32
	done
	ensure_audit "$log" # for the profiles' predictions
	for p in $precs; do
		if [ "$(rest)" -lt 30 ]; then out="$out(no time left for the $p profile); "; break; fi
		local pj=$OUT/profile.$p.json
		echo "--- gdist $model batch $batch $p, profiled" >>"$log"
		w0=$(date +%s)
		gdist_train "$p" "$psteps" GDIST_DEVICE_PROFILE="$pj" >"$LOGS/gpt.profile.$p" 2>>"$log"
		local r=$? d
		walled "profile $p"
		d=$(python3 "$root/benchmarks/gpu/trainbench.py" profile "$pj" --precision "$p" --audit "$OUT/audit.md" --gpu "$gpu" \
			--table "$OUT/profile_vs_audit.txt" --results "$OUT/results.jsonl" 2>>"$log")
		local r2=$?
		{ echo "=== $d"; cat "$pj"; } >>"$log" 2>/dev/null
		[ $r = 0 ] && [ $r2 = 0 ] || rc=1
		out="$out$d (exit $r); "
	done
	echo "${out%; }$note; wall times:${walls%,}"
	return $rc
}

# ncu: Nsight Compute over NCU_COUNT (100) kernels of gpt training after
# NCU_SKIP launches, by default about the second training step's
# forward/backward boundary (the end of its forward pass, the loss, the
# start of its backward pass) as gpu/kernels' launch audit counts them
# (audit.md; trainbench.py ncuskip: a product one launch, bf16 a cast
# more each, an estimate; cuBLAS's own extra launches shift it), else 1200.
# The SpeedOfLight
# section (time, compute and memory throughput as % of the GPU's peak),
# summed by kernel into ncu.txt. Skipped where there is no ncu or no
# permission for the performance counters.
t_ncu() {
	local log=$1
	if [ "$DRY" = 1 ]; then echo "dry run: Nsight Compute needs a GPU"; return 77; fi
	local ncu
	ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
	[ -n "$ncu" ] || { echo "no ncu (Nsight Compute)"; return 77; }
	local model=${GPT_MODEL:-gpt-L12-D768-H12-T1024} batch=${GPT_BATCH:-8} t p=fp32 extra=()
	t=$(echo "$model" | sed -n 's/.*-T\([0-9]*\)$/\1/p')
	if train_precision; then p=${NCU_PRECISION:-bf16} extra=(-precision "$p"); fi
	make_corpus "$LOGS/corpus" "$t" $((8 * batch * t * 2 + 65536)) >>"$log" 2>&1 || { echo "could not build the text corpus"; return 1; }
	local count=${NCU_COUNT:-100} skip=${NCU_SKIP:-}
	[ -n "$skip" ] || ensure_audit "$log"
	[ -n "$skip" ] || skip=$(python3 "$root/benchmarks/gpu/trainbench.py" ncuskip "$OUT/audit.md" "$model" "$batch" "$p" "$count" 2>>"$log")
	[ -n "$skip" ] || skip=1200
	echo "ncu: --launch-skip $skip --launch-count $count ($p)" >>"$log"
	limited "$(rest)" "$ncu" --target-processes all --launch-skip "$skip" --launch-count "$count" --section SpeedOfLight --csv --print-units base \
		"$B/train" -device cuda -nproc 1 -model "$model" -data "$LOGS/corpus" -batch "$batch" -steps 6 -warmup 0 -json -progress=false "${extra[@]}" \
		>"$LOGS/ncu.csv" 2>>"$log"
	local rc=$?
	if grep -q 'ERR_NVGPUCTRPERM' "$LOGS/ncu.csv" "$log"; then
		echo "ncu: no permission for the GPU's performance counters (ERR_NVGPUCTRPERM; needs NVreg_RestrictProfilingToAdminUsers=0 or root)"
		return 77
	fi
	local sum
	sum=$(python3 "$root/benchmarks/gpu/trainbench.py" ncu "$LOGS/ncu.csv" --txt "$OUT/ncu.txt" --results "$OUT/results.jsonl" --precision "$p" 2>>"$log")
	local r=$?
	cat "$OUT/ncu.txt" >>"$log" 2>/dev/null
	echo "$sum; launches $skip to $((skip + count))$([ $rc = 0 ] || echo " (ncu exited $rc)")"
	return $r
}

t_sanitizer() {
	local log=$1
	if [ "$DRY" = 1 ]; then echo "dry run: compute-sanitizer needs a GPU"; return 77; fi
	command -v compute-sanitizer >/dev/null || { echo "no compute-sanitizer"; return 77; }
	(cd "$root/gpu/cuda" && limited "$STEP_LIMIT" compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 \
		"$B/cuda.test" -test.run 'TestCopyRoundTrip|TestStreamsAndEvents|TestPool$' -test.count=1) >"$log" 2>&1
	local rc=$?
	echo "memcheck: $(grep -m1 'ERROR SUMMARY' "$log" || echo 'no summary')"
	return $rc
}

echo "gdist GPU verification: budget ${BUDGET}s, bundle $B, results $OUT$([ "$DRY" = 1 ] && echo ', DRY RUN on the fake')"
# In order of value: the layer tests and the gpt against PyTorch first,
# then the bf16 products' benchmark, the small models against PyTorch,
# the strategies, the NCCL and staging packages' tests, ncu, and the
# checks earlier runs passed.
step inventory 10 40 inventory
step cuda 20 90 t_cuda
step kernels 20 150 t_kernels
step gpt 60 300 t_gpt
step bf16bench 15 60 t_bf16bench
step device 30 150 t_device
step strategies 60 200 t_strategies
step nccl 30 120 t_nccl
step staging 30 120 t_staging
step ncu 60 150 t_ncu
step ranks2 20 90 t_ranks2
step kill 20 60 t_kill
step sanitizer 30 90 t_sanitizer
step train 40 150 t_train
step bench 60 180 t_bench

# Logs, each capped to LOGCAP bytes (head and tail), into one archive.
mkdir -p "$LOGS/capped"
for f in "$LOGS"/*.log "$LOGS"/kill.rank* "$LOGS"/pair.* "$LOGS"/*.jsonl "$LOGS"/gpt.* "$LOGS"/device.torch.* "$LOGS"/ncu.*; do
	[ -f "$f" ] || continue
	if [ "$(stat -c %s "$f")" -gt "$LOGCAP" ]; then
		{ head -c $((LOGCAP / 2)) "$f"; printf '\n[... %s bytes cut ...]\n' "$(stat -c %s "$f")"; tail -c $((LOGCAP / 2)) "$f"; } >"$LOGS/capped/$(basename "$f")"
	else
		cp "$f" "$LOGS/capped/"
	fi
done
tar -C "$LOGS/capped" -czf "$OUT/logs.tar.gz" .
echo
echo "=== summary ($(($(date +%s) - t0))s of ${BUDGET}s)"
cat "$OUT/summary.txt"
[ -f "$OUT/bench.txt" ] && cat "$OUT/bench.txt"
[ -f "$OUT/train_bench.txt" ] && cat "$OUT/train_bench.txt"
[ -f "$OUT/bf16_casts.txt" ] && cat "$OUT/bf16_casts.txt"
[ -f "$OUT/profile_vs_audit.txt" ] && cat "$OUT/profile_vs_audit.txt"
[ -f "$OUT/bf16bench.txt" ] && cat "$OUT/bf16bench.txt"
[ -f "$OUT/strategies.txt" ] && cat "$OUT/strategies.txt"
rm -rf "$LOGS"
exit $failed
