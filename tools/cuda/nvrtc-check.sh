#!/usr/bin/env bash
# Compiles the CUDA kernels of npu/cuda/kernels with NVRTC on a machine
# without a GPU, the way kernels.go hands them over (common.cuh prepended
# to each .cu file), to PTX for compute_90. Any NVRTC from CUDA 11.8 on
# will do (Debian bookworm non-free: apt-get install libnvrtc11.2
# libnvrtc-builtins11.8); NVRTC overrides the library path.
#   tools/cuda/nvrtc-check.sh            # every kernel file
#   tools/cuda/nvrtc-check.sh kda.cu     # some
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kdir=$root/npu/cuda/kernels
lib=${NVRTC:-$(ls /usr/lib/x86_64-linux-gnu/libnvrtc.so.* /usr/local/cuda/lib64/libnvrtc.so.* 2>/dev/null | grep -v builtins | head -1 || true)}
if [ -z "$lib" ]; then
	echo "nvrtc-check: no libnvrtc found (apt-get install libnvrtc11.2 libnvrtc-builtins11.8, or set NVRTC)" >&2
	exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O1 -o "$tmp/nvrtc-check" "$root/tools/cuda/nvrtc-check.c" -ldl
files=("$@")
[ ${#files[@]} -gt 0 ] || files=($(cd "$kdir" && ls *.cu))
args=()
for f in "${files[@]}"; do
	{ cat "$kdir/common.cuh"; echo "#line 1 \"$f\""; cat "$kdir/$f"; } >"$tmp/$f"
	args+=("$f")
done
cd "$tmp" && ./nvrtc-check "$lib" "${args[@]}"
