#!/bin/bash
# GLM-5.3-Flash-w8a8 on 2× Atlas 800 A2 (8 NPUs each): DP2 (one DP rank per
# node) × TP8 inside each node, expert parallel over all 16 NPUs.
# Node 0: the head (API server on :8000, DP coordinator on the RPC port).
# Run configs/ascend/a2-node1.sh on the other node. Written after the
# vllm-ascend GLM-5.3-Flash guide (§5.2); see docs/deployment.md.
set -euo pipefail

# nic_name is the network interface of local_ip (see `ip addr`).
nic_name="${NIC_NAME:-xxxx}"
local_ip="${LOCAL_IP:-xx.xx.xx.1}"
# node0_ip must equal local_ip of node 0 (this node).
node0_ip="${NODE0_IP:-$local_ip}"
MODEL="${MODEL:-/root/.cache/GLM-5.3-Flash-w8a8}"
NPUSERVE="${NPUSERVE:-npuserve}"

[ -f /usr/local/Ascend/ascend-toolkit/set_env.sh ] && . /usr/local/Ascend/ascend-toolkit/set_env.sh
export HCCL_OP_EXPANSION_MODE=AIV
export HCCL_BUFFSIZE=1024
# Collective timeouts far below the 30+ minutes vLLM deployments use: a
# lost node fails requests with 503 within seconds (npuserve heartbeats).
export HCCL_EXEC_TIMEOUT=300
export HCCL_CONNECT_TIMEOUT=600
export HCCL_SOCKET_IFNAME=$nic_name
export HCCL_IF_IP=$local_ip
export ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
# Head start-up waits this long for every DP rank (vLLM's variable).
export VLLM_ENGINE_READY_TIMEOUT_S=3000

exec $NPUSERVE serve "$MODEL" \
    --host 0.0.0.0 \
    --port 8000 \
    --max-model-len 133120 \
    --data-parallel-size 2 \
    --data-parallel-size-local 1 \
    --data-parallel-start-rank 0 \
    --data-parallel-address "$node0_ip" \
    --data-parallel-rpc-port 12321 \
    --tensor-parallel-size 8 \
    --enable-expert-parallel \
    --seed 1024 \
    --served-model-name glm \
    --safetensors-load-strategy prefetch \
    --max-num-seqs 32 \
    --max-num-batched-tokens 8192 \
    --trust-remote-code \
    --quantization ascend \
    --limit-mm-per-prompt '{"image":1,"video":0}' \
    --gpu-memory-utilization 0.85 \
    --speculative-config '{"num_speculative_tokens":3,"method":"deepseek_mtp","enforce_eager":true}' \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY","cudagraph_capture_sizes":[4,8,16,32,64,96,128]}' \
    --api-server-count 1 \
    --device ascend
