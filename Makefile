# npuserve — build, run and test. Everything a fresh machine needs installs
# from these targets: Go modules through the module proxy; Debian's
# docker.io only for the image targets (make image), never for make test.

GO      ?= go
BIN     := bin/npuserve
PORT    ?= 8000
HOST    ?= 127.0.0.1
MODEL   ?= testdata/glm5next/tiny
FUZZTIME ?= 30s
# The GLM-5.3-Flash recipe's serving flags (vLLM / vllm-ascend guides);
# docker/Dockerfile.cpu's CMD has the same (a test compares them).
RECIPE_FLAGS := --reasoning-parser glm45 --tool-call-parser glm47 --enable-auto-tool-choice
# More serve flags for make run, e.g. ARGS="--max-model-len 65536".
ARGS    ?=

.PHONY: all build run test vet fmt-check bench fuzz soak clean \
	image image-test image-ascend docker-engine docker-engine-stop

all: build

build:
	$(GO) build -o $(BIN) ./cmd/npuserve

## run: serve $(MODEL) (default: the tiny model) on $(HOST):$(PORT) with
## the GLM recipe's flags; the CPU backend unless ARGS say otherwise.
run: build
	$(BIN) serve $(MODEL) --host $(HOST) --port $(PORT) $(RECIPE_FLAGS) $(ARGS)

## test: formatting, vet and every unit and integration test (< 20 min on 2 cores),
## then the parity, engine, TP/DP/EP and serving tests again on the checking
## asynchronous backend (--device cpu-async: same tokens as --device cpu).
ASYNC_PKGS := ./engine/model/glm5next/ ./engine/core/ ./engine/worker/ ./engine/dp/ ./cmd/npuserve/
test: fmt-check vet
	$(GO) test -count=1 -timeout 20m ./...
	CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/npuserve # the static build the CPU image ships
	NPUSERVE_TEST_DEVICE=cpu-async $(GO) test -count=1 -timeout 20m $(ASYNC_PKGS)

## test-cuda: the CUDA backend's tests with the GPU required (they fail,
## rather than skip, where no GPU is usable), then the model's golden
## fixtures on --device cuda: run on a GPU host, or build the binaries here
## and carry them there with tools/cuda/run-on-gpu.sh (build-all, session).
.PHONY: test-cuda
test-cuda:
	NPUSERVE_CUDA_TEST=1 CGO_ENABLED=1 $(GO) test -count=1 -v ./npu/cuda/
	NPUSERVE_TEST_DEVICE=cuda CGO_ENABLED=1 $(GO) test -count=1 ./engine/model/glm5next/
	NPUSERVE_TEST_DEVICE=cuda CGO_ENABLED=1 $(GO) test -count=1 -run DecodeGraphs ./engine/core/

## test-simcuda: test-cuda's suites on simcuda, no GPU involved
## (tools/cuda/simt: stand-ins for libcuda, NVRTC and cuBLASLt that compile
## the kernels with g++ against a CPU emulator of the CUDA execution model:
## threads as fibers, warp collectives, mma.sync, ldmatrix and cp.async).
## Results, not timings: what it proves is the kernels' arithmetic and the
## Go side's launches, temporaries and graph capture. make test runs the
## op tests this way (TestSimCUDA); this adds the model's golden fixtures
## and decode graphs on --device cuda.
.PHONY: test-simcuda
SIMCUDA ?= $(CURDIR)/.simcuda
SIMCUDA_ENV = LD_LIBRARY_PATH=$(SIMCUDA) NPUSERVE_CACHE_DIR=$(SIMCUDA)/cache CGO_ENABLED=1
test-simcuda:
	bash tools/cuda/simt/build.sh $(SIMCUDA)
	$(SIMCUDA_ENV) NPUSERVE_CUDA_TEST=1 $(GO) test -count=1 -timeout 60m -run 'TestGPU|TestSIMTKernels' ./npu/cuda/
	$(SIMCUDA_ENV) NPUSERVE_TEST_DEVICE=cuda $(GO) test -count=1 -timeout 60m \
		-run 'TestGolden$$|TestDecodeGraphsMatchEager|TestDecodeGraphLogits|TestCaptureDecodeGraphsRefused|TestGraphPadSlots|TestScratchGrowthFailsCapture' ./engine/model/glm5next/
	$(SIMCUDA_ENV) NPUSERVE_TEST_DEVICE=cuda $(GO) test -count=1 -timeout 60m -run DecodeGraphs ./engine/core/

## test-ascend: the golden and quantized fixtures, decode graphs, the serving tests (one
## rank and multi-rank, over the stand-in's libhccl), hccl/ascend's suite and
## selftest on --device ascend over the stand-in CANN (a test double built
## from C by tools/ascend/build-standin.sh; no NPU involved; about 15
## minutes: the stand-in runs every operator on the host, one thread).
.PHONY: test-ascend
STANDIN ?= $(CURDIR)/.standin
test-ascend:
	bash tools/ascend/build-standin.sh $(STANDIN)
	ASCEND_HOME_PATH=$(STANDIN) NPUSERVE_TEST_DEVICE=ascend $(GO) test -count=1 -timeout 30m -run 'TestGolden$$' ./engine/model/glm5next/
	# decode graphs (aclmdlRICapture) over the decode forms: model and engine
	ASCEND_HOME_PATH=$(STANDIN) NPUSERVE_TEST_DEVICE=ascend $(GO) test -count=1 -timeout 30m \
	  -run 'TestDecodeGraphsMatchEager|TestDecodeGraphLogits|TestCaptureDecodeGraphsRefused' ./engine/model/glm5next/
	ASCEND_HOME_PATH=$(STANDIN) NPUSERVE_TEST_DEVICE=ascend $(GO) test -count=1 -timeout 30m -run 'TestDecodeGraphsGreedyMatchesRunner' ./engine/core/
	# the quantized fixtures as an Ascend 950 (MXFP8 is 950-only)
	ASCEND_HOME_PATH=$(STANDIN) STANDIN_SOC=Ascend950DT_9582 NPUSERVE_TEST_DEVICE=ascend $(GO) test -count=1 -timeout 30m \
	  -run 'TestQuantizedAgreement|TestQuantizeLayout|TestLoadHandMadeMsmodelslim' ./engine/model/glm5next/
	ASCEND_HOME_PATH=$(STANDIN) NPUSERVE_TEST_DEVICE=ascend $(GO) test -count=1 -timeout 30m -run 'TestServeSDK|TestServeGolden|TestServeBadInputs' ./cmd/npuserve/
	# multi-rank serving over the stand-in libhccl: TP2, DP2+EP, DP2xTP2+EP, a headless rank, a killed rank; MTP speculation on one rank, TP2 and DP2+EP
	ASCEND_HOME_PATH=$(STANDIN) STANDIN_DEVICES=4 NPUSERVE_TEST_MULTI_DEVICE=1 NPUSERVE_TEST_DEVICE=ascend $(GO) test -count=1 -timeout 30m \
	  -run 'TestServeAscend|TestServeSpeculative' ./cmd/npuserve/
	# engine/dp's head/headless, rank-failure and rank-process tests (DP2xTP2: 4 stand-in devices)
	ASCEND_HOME_PATH=$(STANDIN) STANDIN_DEVICES=4 NPUSERVE_TEST_DEVICE=ascend $(GO) test -count=1 -timeout 30m ./engine/dp/
	# hccl/ascend's conformance and failure suites on the stand-in libhccl: ranks in-process (8 devices) and as processes
	ASCEND_HOME_PATH=$(STANDIN) STANDIN_DEVICES=8 NPUSERVE_TEST_HCCL=1 $(GO) test -count=1 -timeout 30m ./hccl/ascend/
	ASCEND_HOME_PATH=$(STANDIN) $(GO) run ./cmd/npuserve selftest --device ascend

vet:
	$(GO) vet ./...

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## bench: kernel and model benchmarks (figures go to docs/performance.md).
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 3x -timeout 30m ./npu/cpu/
	$(BIN) bench decode --config configs/small/config.json --batch 1,32 --steps 16
	NPUSERVE_BENCH_CONFIG=$(CURDIR)/configs/small/config.json $(GO) test -run '^$$' -bench EngineDecode -benchtime 8x -timeout 30m ./engine/core/
	$(GO) test -run '^$$' -bench 'DecodeTP|TPCollectives' -benchtime 30x -timeout 30m ./engine/worker/
	$(GO) test -run '^$$' -bench Loopback -timeout 30m ./hccl/
	$(GO) test -run '^$$' -bench StreamingOverhead -timeout 30m ./engine/server/

## fuzz: every fuzz target (or those matching FUZZTARGETS, a regexp) for
## $(FUZZTIME) each, with FUZZPARALLEL workers (default: one per core), so
## a run costs targets x FUZZTIME x workers CPU time: on 2 cores,
## `make fuzz FUZZTIME=130s` is about one CPU-hour over the 14 targets. A
## run whose time ends while Go is still gathering coverage or minimizing
## an input reports "context deadline exceeded" with no failing input: not
## a failure. A failure writes its input under the package's
## testdata/fuzz/, to be committed with the fix.
FUZZTARGETS ?= .
FUZZPARALLEL ?=
fuzz:
	@set -e; n=0; for pkg in $$($(GO) list ./...); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' | grep -E '$(FUZZTARGETS)' || true); do \
	    echo "== $$pkg $$t"; n=$$((n+1)); \
	    if ! out=$$($(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $(if $(FUZZPARALLEL),-parallel $(FUZZPARALLEL)) -fuzzminimizetime 5s $$pkg 2>&1); then \
	      echo "$$out"; \
	      if echo "$$out" | grep -q 'Failing input written' || ! echo "$$out" | grep -q 'context deadline exceeded'; then exit 1; fi; \
	      echo "(fuzz time ran out while gathering coverage or minimizing: no failing input)"; \
	    else echo "$$out" | tail -3; fi; \
	  done; \
	done; echo "fuzz: $$n targets x $(FUZZTIME), no failure"

## soak: 256 concurrent streaming requests (completions and chat) for 60 s
## against the tiny model: zero failures, every stream ends with [DONE], the
## cache is empty afterwards; then the hostile-client test for 60 s with
## 5000 idle connections (TestServeHostile: idle, slow and oversized
## clients and cut streams while a well-behaved client and /health keep
## being served). `make test` runs the same tests with 32 streams for 3 s
## and 300 idle connections for 4 s.
SOAK_STREAMS ?= 256
SOAK_SECONDS ?= 60
SOAK_IDLE ?= 5000
soak:
	NPUSERVE_SOAK_STREAMS=$(SOAK_STREAMS) NPUSERVE_SOAK_SECONDS=$(SOAK_SECONDS) \
	NPUSERVE_HOSTILE_SECONDS=$(SOAK_SECONDS) NPUSERVE_HOSTILE_IDLE=$(SOAK_IDLE) \
	  $(GO) test -count=1 -timeout 15m -run '^(TestServeSoak|TestServeHostile)$$' -v ./cmd/npuserve/

## image: the CPU image $(IMAGE) (docker/Dockerfile.cpu, FROM scratch): a
## static binary and the tiny model, staged in $(IMAGE_DIR). Starts a
## Docker engine first if none answers (docker-engine).
IMAGE      ?= npuserve:cpu
IMAGE_DIR  := out/image/cpu
image: docker-engine
	rm -rf $(IMAGE_DIR)
	mkdir -p $(IMAGE_DIR)/testdata/glm5next
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(IMAGE_DIR)/npuserve ./cmd/npuserve
	cp -R testdata/glm5next/tiny $(IMAGE_DIR)/testdata/glm5next/
	docker build -f docker/Dockerfile.cpu -t $(IMAGE) $(IMAGE_DIR)
	@docker image ls $(IMAGE)

## image-test: build the CPU image, then run the container tests (one
## container serving; a head and a headless container over the RPC port).
image-test: image
	NPUSERVE_IMAGE=$(IMAGE) $(GO) test -count=1 -timeout 10m -run 'TestImage' -v ./docker/

## image-ascend: the Ascend image (docker/Dockerfile: the Go image builds
## the binary with cgo, CANN_IMAGE runs it). Needs both base images
## (pulled from their registries); not built on this project's machines.
ASCEND_IMAGE ?= npuserve:ascend
CANN_IMAGE   ?= quay.io/ascend/cann:8.2.rc1-910b-ubuntu22.04-py3.11
GO_IMAGE     ?= golang:1.26-bookworm
image-ascend: docker-engine
	docker build -f docker/Dockerfile --build-arg GO_IMAGE=$(GO_IMAGE) --build-arg CANN_IMAGE=$(CANN_IMAGE) -t $(ASCEND_IMAGE) .

## docker-engine: a Docker engine that answers `docker info`. Installs
## Debian's docker.io (apt-get, as root) when there is no dockerd, and
## starts dockerd itself where no systemd runs it (log $(DOCKERD_LOG),
## pid $(DOCKERD_PID); make docker-engine-stop stops it).
DOCKERD_LOG ?= /var/log/npuserve-dockerd.log
DOCKERD_PID ?= /run/npuserve-dockerd.pid
docker-engine:
	@if docker info >/dev/null 2>&1; then exit 0; fi; \
	if ! command -v dockerd >/dev/null 2>&1; then \
	  if [ "$$(id -u)" != 0 ]; then echo "docker-engine: no dockerd; install Debian's docker.io (as root: apt-get install docker.io)" >&2; exit 1; fi; \
	  echo "docker-engine: installing Debian's docker.io"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null || exit 1; \
	fi; \
	if docker info >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(ps -o comm= -p 1)" = systemd ]; then \
	  echo "docker-engine: systemctl start docker"; systemctl start docker || exit 1; \
	else \
	  echo "docker-engine: starting dockerd (log $(DOCKERD_LOG))"; \
	  nohup dockerd >$(DOCKERD_LOG) 2>&1 & echo $$! >$(DOCKERD_PID); \
	fi; \
	for i in $$(seq 60); do docker info >/dev/null 2>&1 && exit 0; sleep 1; done; \
	echo "docker-engine: dockerd did not answer within 60 s; see $(DOCKERD_LOG)" >&2; exit 1

## docker-engine-stop: stop the dockerd that docker-engine started.
docker-engine-stop:
	@if [ -f $(DOCKERD_PID) ]; then \
	  pid=$$(cat $(DOCKERD_PID)); kill $$pid 2>/dev/null; \
	  for i in $$(seq 30); do kill -0 $$pid 2>/dev/null || break; sleep 1; done; \
	  rm -f $(DOCKERD_PID); echo "docker-engine-stop: dockerd (pid $$pid) stopped"; \
	else echo "docker-engine-stop: no dockerd started by make docker-engine"; fi

clean:
	rm -rf bin out/image
