#!/bin/bash
# CPU variant of configs/ascend/950dt.sh at small size: the tiny glm5_next
# fixture, TP2 with expert parallel, --device cpu, one machine. The Ascend
# script serves MXFP8 weights (--quantization ascend); the CPU serving path
# loads the fixture's float32 weights (MXFP8 CPU kernels exist in quant/,
# but serving quantized checkpoints on the CPU is not wired up).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
MODEL="${MODEL:-$here/../../testdata/glm5next/tiny}"
NPUSERVE="${NPUSERVE:-npuserve}"
PORT="${PORT:-8000}"

exec $NPUSERVE serve "$MODEL" \
  --host 127.0.0.1 \
  --port "$PORT" \
  --max-model-len 512 \
  --data-parallel-size 1 \
  --tensor-parallel-size 2 \
  --enable-expert-parallel \
  --seed 1024 \
  --served-model-name glm \
  --max-num-seqs 8 \
  --max-num-batched-tokens 512 \
  --api-server-count 1 \
  --device cpu \
  --threads 1
