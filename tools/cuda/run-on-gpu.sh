#!/usr/bin/env bash
# The CUDA backend's GPU round trip. This machine has no GPU: build the
# test binary here, carry it to the GPU host, run it there.
#
#   tools/cuda/run-on-gpu.sh build   # here: .gpu/cuda.test (cgo, stripped)
#   tools/cuda/run-on-gpu.sh run     # there, from the repository root
#   tools/cuda/run-on-gpu.sh build-all   # here: also the model tests and
#                                        # the binary, xz-compressed
#   tools/cuda/run-on-gpu.sh session     # there: STAGES (default
#                                        # "ops model bench hf"; also
#                                        # graphs, selftest, memcheck, mtp,
#                                        # mtp-train, spec-slice, serve,
#                                        # bench-serve, nccl, ncu,
#                                        # fp8wide, prefill, prefill-ab)
#
# With the device tool: run `build`, then call run with carry [".gpu"] and
# the command `bash tools/cuda/run-on-gpu.sh run`. What comes back in $OUT:
# cuda-test.log (every test, verbose, NPUSERVE_CUDA_TEST=1 so that a
# missing GPU fails), cuda-bench.log (NPUSERVE_CUDA_BENCH=1 throughput),
# cuda-cache.log (a second start that must load every kernel from the
# disk cache) and, where compute-sanitizer exists, cuda-memcheck.log
# (MEMCHECK_RUN picks its tests, MEMCHECK_S bounds it, NO_MEMCHECK skips it).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
case "${1:-}" in
build)
	mkdir -p .gpu
	CGO_ENABLED=1 go test -c -ldflags='-s -w' -o .gpu/cuda.test ./npu/cuda/ || exit 1
	ls -la .gpu/cuda.test
	;;
build-all)
	mkdir -p .gpu
	CGO_ENABLED=1 go test -c -ldflags='-s -w' -o .gpu/cuda.test ./npu/cuda/ || exit 1
	CGO_ENABLED=1 go test -c -ldflags='-s -w' -o .gpu/glm5next.test ./engine/model/glm5next/ || exit 1
	CGO_ENABLED=1 go test -c -ldflags='-s -w' -o .gpu/core.test ./engine/core/ || exit 1
	CGO_ENABLED=1 go build -ldflags='-s -w' -o .gpu/npuserve ./cmd/npuserve || exit 1
	CGO_ENABLED=1 go test -c -ldflags='-s -w' -o .gpu/cmd.test ./cmd/npuserve/ || exit 1
	CGO_ENABLED=1 go test -c -ldflags='-s -w' -o .gpu/nccl.test ./hccl/nccl/ || exit 1
	rm -f .gpu/*.xz
	xz -T0 -6 .gpu/cuda.test .gpu/glm5next.test .gpu/core.test .gpu/npuserve .gpu/cmd.test .gpu/nccl.test || exit 1
	ls -la .gpu
	;;
session)
	out=${OUT:-$root/.gpu/out}
	mkdir -p "$out"
	for f in .gpu/*.xz; do xz -dkf "$f"; done
	chmod +x .gpu/*.test .gpu/npuserve
	export NPUSERVE_CACHE_DIR=$root/.gpu/cache NPUSERVE_CUDA_TEST=1
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$out/nvidia-smi.txt"
	lscpu | grep -E 'Model name|^CPU\(s\)' | tee "$out/lscpu.txt"
	rc=0
	for st in ${STAGES:-ops model bench hf}; do
		echo "=== stage $st ($(date -u +%H:%M:%S))"
		case $st in
		ops)
			(cd .gpu && timeout ${OPS_S:-240} ./cuda.test -test.v -test.count=1 -test.timeout=230s) >"$out/cuda-test.log" 2>&1 || rc=1
			grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' "$out/cuda-test.log" | head -40
			(cd .gpu && NPUSERVE_CUDA_BENCH=1 timeout ${OPSBENCH_S:-120} ./cuda.test -test.v -test.run 'TestGPU(MoE)?Throughput|TestGPUDecode(GEMV|HC)') >"$out/cuda-bench.log" 2>&1 || rc=1
			tail -3 "$out/cuda-bench.log"
			;;
		memcheck)
			san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
			[ -n "$san" ] && (cd .gpu && timeout ${MEMCHECK_S:-120} "$san" --tool memcheck --print-limit 20 ./cuda.test -test.run "${MEMCHECK_RUN:-TestGPU}") >"$out/cuda-memcheck.log" 2>&1
			tail -5 "$out/cuda-memcheck.log"
			;;
		model)
			# The golden-fixture parity tests of the model on the GPU.
			(cd engine/model/glm5next && NPUSERVE_TEST_DEVICE=cuda timeout ${MODEL_S:-240} "$root/.gpu/glm5next.test" -test.v -test.count=1 -test.timeout=230s -test.run "${MODEL_RUN:-.}") >"$out/model-test.log" 2>&1 || rc=1
			grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' "$out/model-test.log" | head -40
			;;
		bench)
			for cfg in ${BENCH_CONFIGS:-small slice}; do
				echo "--- $cfg"
				timeout ${BENCH_S:-200} .gpu/npuserve bench decode --device cuda --config configs/$cfg/config.json \
					--batch ${BENCH_BATCH:-1,8,32,128} --context ${BENCH_CONTEXT:-1024} --steps ${BENCH_STEPS:-16} ${BENCH_ARGS:-} 2>&1 | tee "$out/bench-$cfg.log" || rc=1
			done
			;;
		graphs)
			# CUDA graphs: the op-level replay tests, the model's and the
			# engine's graph-vs-eager token tests on --device cuda, then
			# decode eager and with graphs (GRAPH_CONFIGS, BENCH_BATCH).
			{
				(cd .gpu && timeout 120 ./cuda.test -test.v -test.count=1 -test.run 'TestGPUGraph')
				(cd engine/model/glm5next && NPUSERVE_TEST_DEVICE=cuda timeout 180 "$root/.gpu/glm5next.test" -test.v -test.count=1 -test.run 'Graph')
				(cd engine/core && NPUSERVE_TEST_DEVICE=cuda timeout 180 "$root/.gpu/core.test" -test.v -test.count=1 -test.run 'DecodeGraphs')
			} >"$out/graphs-test.log" 2>&1 || rc=1
			grep -E '^(--- FAIL|FAIL|ok|PASS|panic)|graph memory|replays' "$out/graphs-test.log" | head -40
			for cfg in ${GRAPH_CONFIGS:-small slice}; do
				for g in false true; do
					echo "--- $cfg cudagraph=$g"
					timeout ${BENCH_S:-200} .gpu/npuserve bench decode --device cuda --config configs/$cfg/config.json --cudagraph=$g \
						--batch ${BENCH_BATCH:-1,8,32,128} --context ${BENCH_CONTEXT:-1024} --steps ${BENCH_STEPS:-16} 2>&1 | tee -a "$out/bench-graphs-$cfg.log" || rc=1
				done
			done
			;;
		fp8wide)
			# The 512-wide block-FP8 model on the GPU against the CPU, with
			# the e4m3 tensor cores and without them.
			for tc in 1 0; do
				echo "--- NPUSERVE_CUDA_FP8_TC=$tc" >>"$out/fp8wide.log"
				(cd engine/model/glm5next && NPUSERVE_CUDA_FP8_TC=$tc NPUSERVE_TEST_DEVICE=cuda timeout 120 "$root/.gpu/glm5next.test" -test.v -test.count=1 -test.run 'TestBlockFP8WideOnDevice') >>"$out/fp8wide.log" 2>&1 || rc=1
			done
			grep -E '^(--- |ok|FAIL|PASS)' "$out/fp8wide.log"
			;;
		prefill)
			# The GPU time by kernel of one slice prefill (PREFILL_CONTEXT
			# tokens: the second sequence of a batch of 2 is timed).
			NPUSERVE_CUDA_PROFILE=1 timeout ${PREFILL_S:-200} .gpu/npuserve bench decode --device cuda --config configs/slice/config.json \
				--batch 2 --context ${PREFILL_CONTEXT:-8192} --steps 2 >"$out/prefill.log" 2>&1 || rc=1
			tail -5 "$out/prefill.log"
			;;
		prefill-ab)
			# Prefill of PREFILL_CONTEXT tokens (slice, no profile: wall
			# time) with each prefill kernel choice switched back, and
			# with bf16 activations, then at PREFILL_LONG (16K) tokens.
			for e in NPUSERVE_CUDA_AB=default NPUSERVE_CUDA_MOE_PIPE=0 NPUSERVE_CUDA_KDA=rows NPUSERVE_CUDA_BF16_ACTIVATIONS=1; do
				echo "--- $e" | tee -a "$out/prefill-ab.log"
				env "$e" timeout ${PREFILL_S:-200} .gpu/npuserve bench decode --device cuda --config configs/slice/config.json \
					--batch 2 --context ${PREFILL_CONTEXT:-8192} --steps 2 2>&1 | grep -i prefill | tee -a "$out/prefill-ab.log" || rc=1
			done
			echo "--- ${PREFILL_LONG:-16384} tokens" | tee -a "$out/prefill-ab.log"
			NPUSERVE_CUDA_PROFILE=1 timeout ${PREFILL_S:-200} .gpu/npuserve bench decode --device cuda --config configs/slice/config.json \
				--batch 2 --context ${PREFILL_LONG:-16384} --steps 2 >>"$out/prefill-ab.log" 2>&1 || rc=1
			tail -5 "$out/prefill-ab.log"
			;;
		ncu)
			# Exact per-kernel GPU time of eager decode (Nsight Compute, one
			# pass per kernel, caches and clocks left alone), NCU_ARGS for
			# the bench decode arguments; the CSV comes back for analysis.
			ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
			[ -n "$ncu" ] && timeout ${NCU_S:-300} "$ncu" --clock-control none --cache-control none --csv --page raw \
				--metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size \
				.gpu/npuserve bench decode --device cuda ${NCU_ARGS:---config configs/slice/config.json --batch 1 --context 64 --steps 3} \
				>"$out/ncu.csv" 2>"$out/ncu.err" || rc=1
			tail -3 "$out/ncu.err"; wc -l "$out/ncu.csv"
			;;
		hf)
			timeout ${HF_S:-200} python3 tools/bench/hf_decode.py --config configs/small/config.json --batch 1,16 --context 64 --steps 32 2>&1 | tail -5 | tee "$out/hf-decode.log" || rc=1
			;;
		serve)
			# The serving tests (OpenAI SDK, goldens through the server,
			# bad inputs, soak, shutdown) against serve --device cuda.
			(cd cmd/npuserve && NPUSERVE_TEST_BINARY="$root/.gpu/npuserve" NPUSERVE_TEST_DEVICE=cuda timeout ${SERVE_S:-240} "$root/.gpu/cmd.test" -test.v -test.count=1 -test.timeout=230s \
				-test.run "${SERVE_RUN:-^(TestServeSDK|TestServeGolden|TestServeBadInputs|TestServeSoak|TestServeShutdown|TestServeOptions|TestServeSpeculative)\$}") >"$out/serve-test.log" 2>&1 || rc=1
			grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' "$out/serve-test.log" | head -20
			;;
		bench-serve)
			# The seed protocol, scaled: random 16K-in / 256-out prompts
			# against serve --device cuda on the slice (dummy weights; the
			# tiny fixture's tokenizer makes the random prompts).
			m=$root/.gpu/slice-model
			mkdir -p "$m" && cp configs/slice/config.json "$m/" && cp testdata/glm5next/tiny/tokenizer* testdata/glm5next/tiny/generation_config.json "$m/"
			.gpu/npuserve serve "$m" --device cuda --load-format dummy --port 8199 --max-model-len ${BS_LEN:-17000} --max-num-seqs 32 >"$out/bench-serve-server.log" 2>&1 &
			spid=$!
			for i in $(seq 180); do curl -sf http://127.0.0.1:8199/health >/dev/null && break; sleep 1; done
			for c in ${BS_CONC:-1 8}; do
				timeout ${BS_S:-150} .gpu/npuserve bench serve --port 8199 --random-input-len ${BS_IN:-16384} --random-output-len ${BS_OUT:-256} \
					--num-prompts $((c > 1 ? c : 2)) --max-concurrency $c --ignore-eos --disable-tqdm --result-file "$out/bench-serve-c$c.json" >"$out/bench-serve-c$c.txt" 2>&1 || rc=1
				grep -E "throughput|TTFT|TPOT" "$out/bench-serve-c$c.txt" | head -8
			done
			kill $spid; wait $spid 2>/dev/null
			;;
		mtp-train)
			# The trained fixture's MTP layer (tools/golden/train_fixture.py
			# --mtp, trunk frozen), then its acceptance on the GPU.
			PYTHONPATH=tools/golden timeout ${MTPT_S:-240} python3 tools/golden/train_fixture.py --mtp --out testdata/glm5next \
				--max-seconds ${MTPT_TRAIN_S:-90} >"$out/mtp-train.log" 2>&1 || rc=1
			tail -4 "$out/mtp-train.log"
			if [ -d testdata/glm5next/trained-mtp ]; then
				tar czf "$out/trained-mtp.tgz" -C testdata/glm5next trained-mtp
				(cd engine/model/glm5next && NPUSERVE_TEST_DEVICE=cuda timeout 120 "$root/.gpu/glm5next.test" -test.v -test.count=1 \
					-test.run 'TestSpecTrainedAcceptance|TestMTPGolden') >"$out/mtp-accept.log" 2>&1 || rc=1
				grep -E "accept|^(--- |ok|PASS|FAIL)" "$out/mtp-accept.log" | head -12
				timeout 150 .gpu/npuserve bench spec --model testdata/glm5next/trained-mtp --device cuda --speculative-tokens 0,1,3 \
					--num-prompts 8 --prompt-len 32 --max-tokens 64 >"$out/bench-spec-cuda.txt" 2>&1 || rc=1
				tail -6 "$out/bench-spec-cuda.txt"
			fi
			;;
		spec-slice)
			# MTP speculation's step cost at the real per-layer shapes (the
			# slice, random weights and MTP layer: acceptance ≈ 0), and the
			# speed-up it implies at the trained MTP layer's acceptance.
			timeout ${SPEC_S:-240} .gpu/npuserve bench spec --config configs/slice/config.json --device cuda --speculative-tokens 0,1,3 \
				--reference-acceptance ${SPEC_REF:-0.6164,0.2543,0.0647} --num-prompts 2 --prompt-len 32 --max-tokens 32 >"$out/bench-spec-slice.txt" 2>&1 || rc=1
			grep '^{' "$out/bench-spec-slice.txt" | cut -c1-400
			;;
		nccl)
			[ -x .gpu/nccl.test ] && (cd .gpu && NPUSERVE_CUDA_TEST=1 timeout 120 ./nccl.test -test.v -test.count=1) >"$out/nccl-test.log" 2>&1 || rc=1
			grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' "$out/nccl-test.log" | head -20
			;;
		selftest)
			[ -z "${SELFTEST_JSON_ONLY:-}" ] && { timeout ${SELFTEST_S:-120} .gpu/npuserve selftest --device cuda >"$out/selftest.txt" 2>&1 || rc=1; tail -4 "$out/selftest.txt"; }
			timeout ${SELFTEST_S:-120} .gpu/npuserve selftest --device cuda --json >"$out/selftest.json" 2>/dev/null
			;;
		mtp)
			# The MTP goldens (tools/golden/mtp_golden.py) into $OUT.
			mtp=${MTP_SCRIPT:-tools/golden/mtp_golden.py}
			PYTHONPATH=tools/golden timeout ${MTP_S:-200} python3 "$mtp" --src testdata/glm5next/tiny --out "$out/mtp" >"$out/mtp-golden.log" 2>&1 || rc=1
			tail -5 "$out/mtp-golden.log"
			;;
		esac
	done
	# One archive: the device tool brings back a few files only.
	(cd "$out" && tar czf ../results.tgz . && rm -rf ./* && mv ../results.tgz .)
	exit $rc
	;;
run)
	out=${OUT:-$root/.gpu/out}
	mkdir -p "$out"
	export NPUSERVE_CACHE_DIR=$root/.gpu/cache NPUSERVE_CUDA_TEST=1
	rm -rf "$NPUSERVE_CACHE_DIR"
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$out/nvidia-smi.txt"
	cd .gpu
	rc=0
	./cuda.test -test.v -test.count=1 -test.timeout=300s 2>&1 | tee "$out/cuda-test.log" || rc=1
	grep -E '^(--- FAIL|FAIL|ok|PASS)' "$out/cuda-test.log" | head -40
	./cuda.test -test.v -test.run 'TestGPUCopy$' 2>&1 | grep -E '^cuda:|^(ok|PASS|FAIL)' | tee "$out/cuda-cache.log"
	NPUSERVE_CUDA_BENCH=1 ./cuda.test -test.v -test.run 'TestGPUThroughput' 2>&1 | tee "$out/cuda-bench.log" || rc=1
	san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
	if [ -n "$san" ] && [ -z "${NO_MEMCHECK:-}" ]; then
		timeout ${MEMCHECK_S:-90} "$san" --tool memcheck --print-limit 20 ./cuda.test -test.run \
			"${MEMCHECK_RUN:-TestGPU(Copy|Fill|Elementwise|SwiGLU|Softmax|Norms|GatherScatter|TopK|MatMul|HC|Conv1d|KDAGate|Router|MoE|MatMulQ|MoEQ|SampleReduce|KDA|KPool|DSAIndex|SparseMLA|SparseMLAFromIndex|AttnDeviceErrors)\$}" \
			>"$out/cuda-memcheck.log" 2>&1
		echo "memcheck exit $?"; tail -5 "$out/cuda-memcheck.log"
	fi
	exit $rc
	;;
*)
	echo "usage: $0 build|run" >&2
	exit 2
	;;
esac
