#!/usr/bin/env bash
# Builds the stand-in CANN (npu/ascend/testdata/standin: a test double of
# libascendcl, libnnopbase, libopapi and libhccl written from the public API, with
# device memory in host RAM) into DIR/lib64, the layout CANN's set_env.sh
# points ASCEND_HOME_PATH at, so that whole programs and other packages'
# tests can run on --device ascend without an NPU:
#   tools/ascend/build-standin.sh /tmp/standin
#   ASCEND_HOME_PATH=/tmp/standin NPUSERVE_TEST_DEVICE=ascend go test ./engine/model/glm5next/
# STANDIN_HBM_BYTES sets the stand-in's device memory (default: its own),
# STANDIN_DEVICES its number of devices (default 2; a DP2xTP2 node needs 4).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:?usage: $0 DIR}
src=$root/npu/ascend/testdata/standin
lib=$dir/lib64
mkdir -p "$lib"
cc=${CC:-cc}
flags=(-shared -fPIC -O1 -fvisibility=default -L"$lib" -Wl,-rpath,"$lib")
"$cc" "${flags[@]}" -o "$lib/libascendcl.so" "$src/acl.c" -lpthread -lm
"$cc" "${flags[@]}" -o "$lib/libnnopbase.so" "$src/nnopbase.c" -lascendcl -lpthread -lm
"$cc" "${flags[@]}" -o "$lib/libopapi.so" $(ls "$src"/opapi*.c | sort) -lnnopbase -lascendcl -lpthread -lm
# libhccl: multi-process collectives on the stand-in's streams (hccl.c)
"$cc" "${flags[@]}" -o "$lib/libhccl.so" "$src/hccl.c" -lascendcl -lpthread -lm
echo "stand-in CANN in $dir (ASCEND_HOME_PATH=$dir)"
