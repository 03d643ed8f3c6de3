#!/bin/bash
# GLM-5.3-Flash-w8a8-mxfp8 on one 950DT (8 NPUs): TP8 with expert parallel,
# MXFP8 weights. Written after the vllm-ascend GLM-5.3-Flash guide (§5.1);
# see docs/deployment.md.
set -euo pipefail

MODEL="${MODEL:-/root/.cache/GLM-5.3-Flash-w8a8-mxfp8}"
NPUSERVE="${NPUSERVE:-npuserve}"

[ -f /usr/local/Ascend/ascend-toolkit/set_env.sh ] && . /usr/local/Ascend/ascend-toolkit/set_env.sh
export HCCL_BUFFSIZE=1024
export HCCL_EXEC_TIMEOUT=300
export ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7

exec $NPUSERVE serve "$MODEL" \
  --host 0.0.0.0 \
  --port 8000 \
  --data-parallel-size 1 \
  --tensor-parallel-size 8 \
  --enable-expert-parallel \
  --seed 1024 \
  --quantization ascend \
  --served-model-name glm \
  --max-num-seqs 32 \
  --max-model-len 132096 \
  --max-num-batched-tokens 8192 \
  --trust-remote-code \
  --gpu-memory-utilization 0.9 \
  --limit-mm-per-prompt '{"image": 1, "video": 0}' \
  --compilation-config '{"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [1,2,4,8,16,32,64,96,128]}' \
  --speculative-config '{"num_speculative_tokens": 3, "method": "deepseek_mtp", "enforce_eager": true}' \
  --device ascend
