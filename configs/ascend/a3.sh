#!/bin/bash
# GLM-5.3-Flash-w8a8 on one Atlas 800 A3 (16 NPUs): TP16 with expert
# parallel. Written after the vllm-ascend GLM-5.3-Flash guide (§5.1); see
# docs/deployment.md.
set -euo pipefail

MODEL="${MODEL:-/root/.cache/GLM-5.3-Flash-w8a8}"
NPUSERVE="${NPUSERVE:-npuserve}"

[ -f /usr/local/Ascend/ascend-toolkit/set_env.sh ] && . /usr/local/Ascend/ascend-toolkit/set_env.sh
export HCCL_OP_EXPANSION_MODE="AIV"
export HCCL_BUFFSIZE=400
export HCCL_EXEC_TIMEOUT=300
export ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15

exec $NPUSERVE serve "$MODEL" \
  --host 0.0.0.0 \
  --port 8000 \
  --max-model-len 133120 \
  --data-parallel-size 1 \
  --tensor-parallel-size 16 \
  --enable-expert-parallel \
  --seed 1024 \
  --served-model-name glm \
  --safetensors-load-strategy prefetch \
  --max-num-seqs 32 \
  --max-num-batched-tokens 8192 \
  --trust-remote-code \
  --quantization ascend \
  --limit-mm-per-prompt '{"image": 1, "video": 0}' \
  --gpu-memory-utilization 0.85 \
  --speculative-config '{"num_speculative_tokens": 3, "method": "deepseek_mtp", "enforce_eager": true}' \
  --compilation-config '{"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [1,2,4,8,16,32,64,96,128]}' \
  --api-server-count 1 \
  --device ascend
