#!/usr/bin/env bash
# Builds simcuda (simcuda.cpp: libcuda, NVRTC and cuBLASLt stand-ins that
# run npu/cuda on the CPU) into DIR (default
# ${XDG_CACHE_HOME:-~/.cache}/npuserve/simcuda) as libsimcuda.so, with
# the three names the backend dlopens beside it, and prints DIR:
#   LD_LIBRARY_PATH=$(tools/cuda/simt/build.sh) NPUSERVE_CUDA_TEST=1 go test ./npu/cuda
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/npuserve/simcuda}
mkdir -p "$out"
# The emulation's version (nvrtcVersion's minor): from its sources.
build=$(cat "$here/simt.h" "$here/halves.h" "$here/prep.py" "$here/simcuda.cpp" | cksum | awk '{print 1000 + $1 % 9000}')
${CXX:-g++} -std=c++17 -O2 -fPIC -shared -Wall -Wno-unused-result -DSIMT_DIR="\"$here\"" -DSIMT_BUILD=$build -o "$out/libsimcuda.so.tmp" "$here/simcuda.cpp" -ldl
mv "$out/libsimcuda.so.tmp" "$out/libsimcuda.so"
for n in libcuda.so.1 libnvrtc.so.12 libcublasLt.so.12; do
	ln -sf libsimcuda.so "$out/$n"
done
echo "$out"
