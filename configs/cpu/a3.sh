#!/bin/bash
# CPU variant of configs/ascend/a3.sh at small size: the tiny glm5_next
# fixture, TP4 with expert parallel (the A3's TP16 layout, scaled to the
# fixture's 4 heads), --device cpu, one machine.
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
  --tensor-parallel-size 4 \
  --enable-expert-parallel \
  --seed 1024 \
  --served-model-name glm \
  --max-num-seqs 8 \
  --max-num-batched-tokens 512 \
  --api-server-count 1 \
  --device cpu \
  --threads 1
