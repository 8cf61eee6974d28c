#!/usr/bin/env bash
# Builds the GPU verification bundle on any Linux amd64 machine with Go and
# gcc, no CUDA needed: the test binaries of gpu/cuda, gpu/cublas, gpu/rtc,
# gpu/kernels (also the launch audit), gpu/gemm (also BenchmarkBF16Step),
# gpu/devmodel, comm/nccl and comm/staging, commbench, ncclcheck, train
# (every train run of the device, strategies and gpt steps), the
# PyTorch peers (torch.distributed's NCCL; eager training: torch_gpu_train.py, gpt.py) and the fake CUDA library (for verify.sh's dry run). The Go programs load CUDA and
# NCCL with dlopen at run time, so they need only libc (checked here).
# Build from a tree without uncommitted changes (BUILD_INFO says so if not).
#
#   benchmarks/gpu/build.sh [DIR]        # default DIR: bin/gpu (git-ignored); also DIR.tar.xz
#
# Then, on the GPU machine, from the repository's root (the tests read files
# of their packages): benchmarks/gpu/verify.sh (BUNDLE=DIR if not bin/gpu).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="/usr/local/go/bin:$PATH"
export CGO_ENABLED=1
OUT=${1:-bin/gpu}
rm -rf "$OUT"
mkdir -p "$OUT"
# noblas: OpenBLAS may be missing on the GPU machine; train's models then
# use gonum's pure-Go BLAS (the nccl-vs-shm comparison runs both there).
flags=(-tags noblas -trimpath -ldflags "-s -w")
go test -c "${flags[@]}" -o "$OUT/cuda.test" ./gpu/cuda
go test -c "${flags[@]}" -o "$OUT/cublas.test" ./gpu/cublas
go test -c "${flags[@]}" -o "$OUT/rtc.test" ./gpu/rtc
go test -c "${flags[@]}" -o "$OUT/kernels.test" ./gpu/kernels
go test -c "${flags[@]}" -o "$OUT/gemm.test" ./gpu/gemm
go test -c "${flags[@]}" -o "$OUT/devmodel.test" ./gpu/devmodel
go test -c "${flags[@]}" -o "$OUT/nccl.test" ./comm/nccl
go test -c "${flags[@]}" -o "$OUT/staging.test" ./comm/staging
go build "${flags[@]}" -o "$OUT/commbench" ./benchmarks/commbench
go build "${flags[@]}" -o "$OUT/ncclcheck" ./benchmarks/gpu/ncclcheck
go build "${flags[@]}" -o "$OUT/train" ./cmd/train
cp benchmarks/peers/torch_nccl_bench.py benchmarks/peers/peerutil.py benchmarks/peers/torch_gpu_train.py benchmarks/peers/gpt.py "$OUT/"
gcc -O2 -shared -fPIC -pthread -fvisibility=hidden -o "$OUT/libfakecuda.so" gpu/cudafake/testdata/fakecuda.c

bad=0
glibc=""
for b in "$OUT"/*.test "$OUT/commbench" "$OUT/ncclcheck" "$OUT/train"; do
	extra=$(ldd "$b" | grep -vE 'linux-vdso|libc\.so|ld-linux|libpthread\.so|libdl\.so|libm\.so' || true)
	if [ -n "$extra" ]; then
		echo "build.sh: $b needs more than libc:" >&2
		echo "$extra" >&2
		bad=1
	fi
	v=$(grep -ao 'GLIBC_2\.[0-9]*' "$b" | sort -uV | tail -1)
	glibc=$(printf '%s\n%s\n' "$glibc" "$v" | sort -V | tail -1)
done
[ "$bad" = 0 ] || exit 1
echo "$glibc" >"$OUT/GLIBC_NEEDED"
echo "built $(date -u +%Y-%m-%dT%H:%MZ) from $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!bin' 2>/dev/null || echo ' (with uncommitted changes)'), $(go version | cut -d' ' -f3)" >"$OUT/BUILD_INFO"
rm -f "$OUT.tar.xz"
if [ "${PACK:-1}" = 1 ]; then # PACK=0: no archive (the dry-run test)
	tar -C "$(dirname "$OUT")" -cJf "$OUT.tar.xz" "$(basename "$OUT")"
	du -sh "$OUT.tar.xz"
fi
du -sh "$OUT"
echo "built $OUT (binaries need only libc, version ${glibc#GLIBC_} or later)."
echo "On the GPU machine, from the repository's root: benchmarks/gpu/verify.sh"
