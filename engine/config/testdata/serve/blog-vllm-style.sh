# Configuration blog (seed 003) §4.3, "vLLM 风格启动", verbatim (its line breaks were lost in the capture)
python -m vllm.entrypoints.openai.api_server \
  --model /models/GLM-5.3-Flash \
  --served-model-name glm-5.3-flash \
  --tensor-parallel-size 8 \
  --max-model-len 1048576 \
  --kv-cache-dtype auto \
  --trust-remote-code
