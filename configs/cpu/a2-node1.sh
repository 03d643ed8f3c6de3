#!/bin/bash
# CPU variant of configs/ascend/a2-node0.sh at small size: the tiny
# glm5_next fixture, DP2 (one DP rank per node) × TP2, expert parallel over
# the 4 ranks, --device cpu. Node 1, headless. Both nodes may be one
# machine (the defaults: loopback) or two hosts/namespaces (set LOCAL_IP
# and NODE0_IP).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
local_ip="${LOCAL_IP:-127.0.0.1}"
node0_ip="${NODE0_IP:-127.0.0.1}"
MODEL="${MODEL:-$here/../../testdata/glm5next/tiny}"
NPUSERVE="${NPUSERVE:-npuserve}"
PORT="${PORT:-8000}"
RPC_PORT="${RPC_PORT:-12321}"

# This node's address for the ranks' communicators (HCCL_IF_IP, as on
# Ascend).
export HCCL_IF_IP=$local_ip

exec $NPUSERVE serve "$MODEL" \
    --host "$local_ip" \
    --port "$PORT" \
    --headless \
    --max-model-len 512 \
    --data-parallel-size 2 \
    --data-parallel-size-local 1 \
    --data-parallel-start-rank 1 \
    --data-parallel-address "$node0_ip" \
    --data-parallel-rpc-port "$RPC_PORT" \
    --tensor-parallel-size 2 \
    --enable-expert-parallel \
    --seed 1024 \
    --served-model-name glm \
    --max-num-seqs 8 \
    --max-num-batched-tokens 512 \
    --device cpu \
    --threads 1
