# vllm-ascend GLM-5.3-Flash guide §9 FAQ: function calling flags added to the A3 command
vllm serve Eco-Tech/GLM-5.3-Flash-w8a8 \
  --tensor-parallel-size 16 \
  --enable-expert-parallel \
  --tool-call-parser glm47 \
  --reasoning-parser glm45 \
  --enable-auto-tool-choice \
  --quantization ascend
