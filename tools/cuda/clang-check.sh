#!/usr/bin/env bash
# Type-checks the CUDA kernels of npu/cuda/kernels with clang (CUDA device
# mode, no CUDA toolkit needed), the way kernels.go hands them to NVRTC:
# common.cuh prepended to each .cu file. A machine without a GPU catches
# syntax and type errors here before a GPU run does.
#   tools/cuda/clang-check.sh            # every kernel file
#   tools/cuda/clang-check.sh topk.cu    # some
# Needs clang 16 or later (apt-get install clang-16); CLANG overrides.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kdir=$root/npu/cuda/kernels
clang=${CLANG:-$(command -v clang++-16 || command -v clang++-17 || command -v clang++-18 || command -v clang++ || true)}
if [ -z "$clang" ]; then
	echo "clang-check: no clang++ found (apt-get install clang-16)" >&2
	exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/inc/crt" && : >"$tmp/inc/crt/sm_70_rt.hpp"
files=("$@")
[ ${#files[@]} -gt 0 ] || files=($(cd "$kdir" && ls *.cu))
fail=0
for f in "${files[@]}"; do
	cat "$kdir/common.cuh" "$kdir/$f" >"$tmp/$f"
	if "$clang" -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib -std=c++17 \
		-Xclang -target-feature -Xclang +ptx70 -Wall -Wno-unknown-pragmas -Werror=return-type \
		-I"$tmp/inc" -include "$root/tools/cuda/clang-prelude.h" -S -o "$tmp/${f%.cu}.ptx" "$tmp/$f"; then
		echo "ok   $f ($(grep -c '^.visible .entry' "$tmp/${f%.cu}.ptx") kernels)"
	else
		echo "FAIL $f"
		fail=1
	fi
done
exit $fail
