# npuserve — build, run and test. Everything a fresh machine needs installs
# from these targets (Go modules through the module proxy; no apt packages).

GO      ?= go
BIN     := bin/npuserve
PORT    ?= 8000
HOST    ?= 127.0.0.1
MODEL   ?= testdata/glm5next/tiny
FUZZTIME ?= 30s

.PHONY: all build run test vet fmt-check bench fuzz soak clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/npuserve

## run: serve the default tiny model on $(HOST):$(PORT) on the CPU backend.
run: build
	$(BIN) serve $(MODEL) --host $(HOST) --port $(PORT)

## test: formatting, vet and every unit and integration test (< 20 min on 2 cores),
## then the parity, engine, TP/DP/EP and serving tests again on the checking
## asynchronous backend (--device cpu-async: same tokens as --device cpu).
ASYNC_PKGS := ./engine/model/glm5next/ ./engine/core/ ./engine/worker/ ./engine/dp/ ./cmd/npuserve/
test: fmt-check vet
	$(GO) test -count=1 -timeout 20m ./...
	NPUSERVE_TEST_DEVICE=cpu-async $(GO) test -count=1 -timeout 20m $(ASYNC_PKGS)

## test-cuda: the CUDA backend's tests with the GPU required (they fail,
## rather than skip, where no GPU is usable): run on a GPU host, or build
## the binary here and carry it there with tools/cuda/run-on-gpu.sh.
.PHONY: test-cuda
test-cuda:
	NPUSERVE_CUDA_TEST=1 CGO_ENABLED=1 $(GO) test -count=1 -v ./npu/cuda/

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

clean:
	rm -rf bin
