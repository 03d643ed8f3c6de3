#!/usr/bin/env bash
# The CUDA backend's GPU round trip. This machine has no GPU: build the
# test binary here, carry it to the GPU host, run it there.
#
#   tools/cuda/run-on-gpu.sh build   # here: .gpu/cuda.test (cgo, stripped)
#   tools/cuda/run-on-gpu.sh run     # there, from the repository root
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
			"${MEMCHECK_RUN:-TestGPU(Copy|Fill|Elementwise|SwiGLU|Softmax|Norms|GatherScatter|TopK|MatMul|HC|Conv1d|KDAGate|Router|KDA|KPool|DSAIndex|SparseMLA|SparseMLAFromIndex|AttnDeviceErrors)\$}" \
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
