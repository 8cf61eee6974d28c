#!/usr/bin/env bash
# Builds the GPU verification bundle on any Linux amd64 machine with Go and
# gcc, no CUDA needed: the test binaries of gpu/cuda, comm/nccl and
# comm/staging, commbench, run.sh and the PyTorch peer. They load CUDA and
# NCCL with dlopen at run time, so they need only libc (checked here).
#
#   benchmarks/gpu/build.sh [OUT]        # default OUT: bin/gpu (git-ignored)
#
# Then copy OUT (or OUT.tar.gz) to the GPU machine and run OUT/run.sh there.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="/usr/local/go/bin:$PATH"
export CGO_ENABLED=1
OUT=${1:-bin/gpu}
rm -rf "$OUT" "$OUT.tar.gz"
mkdir -p "$OUT"
# noblas: nothing here uses the models, but keep OpenBLAS out for sure.
flags=(-tags noblas -trimpath -ldflags "-s -w")
go test -c "${flags[@]}" -o "$OUT/cuda.test" ./gpu/cuda
go test -c "${flags[@]}" -o "$OUT/nccl.test" ./comm/nccl
go test -c "${flags[@]}" -o "$OUT/staging.test" ./comm/staging
go build "${flags[@]}" -o "$OUT/commbench" ./benchmarks/commbench
cp benchmarks/gpu/run.sh benchmarks/peers/torch_nccl_bench.py "$OUT/"
chmod +x "$OUT/run.sh"

bad=0
glibc=""
for b in "$OUT"/*.test "$OUT/commbench"; do
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
echo "$glibc" > "$OUT/GLIBC_NEEDED"
tar -C "$(dirname "$OUT")" -czf "$OUT.tar.gz" "$(basename "$OUT")"
du -sh "$OUT" "$OUT.tar.gz"
echo "built $OUT (binaries need only libc, version ${glibc#GLIBC_} or later)."
echo "On the GPU machine: $OUT/run.sh   (or: tar xzf $(basename "$OUT").tar.gz && $(basename "$OUT")/run.sh)"
