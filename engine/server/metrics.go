package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the vllm:* Prometheus series of vllm/v1/metrics/loggers.py
// (serving-compat.md §2(d)), with the labels model_name and engine, in a
// private registry.
type metrics struct {
	reg *prometheus.Registry

	success       *prometheus.CounterVec
	ttft          prometheus.Observer
	itl           prometheus.Observer
	tpot          prometheus.Observer
	reqTPOT       prometheus.Observer
	e2e           prometheus.Observer
	queue         prometheus.Observer
	inference     prometheus.Observer
	prefill       prometheus.Observer
	decode        prometheus.Observer
	prefillPerTok prometheus.Observer
	promptToks    prometheus.Observer
	genToks       prometheus.Observer
	maxGenToks    prometheus.Observer
	paramsN       prometheus.Observer
	paramsMax     prometheus.Observer
	iterTokens    prometheus.Observer
}

// finishReasons are vLLM's FinishReason values, pre-created as labels.
var finishReasons = []string{"stop", "length", "abort", "error"}

var (
	ttftBuckets    = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	latencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	iterBuckets    = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
	nBuckets       = []float64{1, 2, 5, 10, 20}
)

// buckets125 is vLLM's build_1_2_5_buckets(max): 1, 2, 5, 10, 20, 50, …
// up to max.
func buckets125(maxV int) []float64 {
	var out []float64
	for exp := 1; ; exp *= 10 {
		for _, m := range []int{1, 2, 5} {
			v := m * exp
			if v > maxV {
				return out
			}
			out = append(out, float64(v))
		}
	}
}

func newMetrics(model string, maxModelLen int, eng Engine) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	labels := prometheus.Labels{"model_name": model, "engine": "0"}
	gauge := func(name, help string, f func(core.Stats) float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return f(eng.Stats()) }))
	}
	counter := func(name, help string, f func(core.Stats) float64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return f(eng.Stats()) }))
	}
	hist := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
		m.reg.MustRegister(h)
		return h
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", func(s core.Stats) float64 { return float64(s.Running) })
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", func(s core.Stats) float64 { return float64(s.Waiting) })
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", func(s core.Stats) float64 { return s.KVUsage })
	counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", func(s core.Stats) float64 { return float64(s.Preemptions) })
	counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", func(s core.Stats) float64 { return float64(s.PromptTokens) })
	counter("vllm:generation_tokens_total", "Number of generation tokens processed.", func(s core.Stats) float64 { return float64(s.GenerationTokens) })
	counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", func(core.Stats) float64 { return 0 })
	counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", func(core.Stats) float64 { return 0 })

	st := eng.Stats()
	if k := st.NumSpeculativeTokens; k > 0 {
		// vLLM's SpecDecodingProm counters (glm5next-features.md §2.6).
		counter("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", func(s core.Stats) float64 { return float64(s.SpecDrafts) })
		counter("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", func(s core.Stats) float64 { return float64(s.SpecDraftTokens) })
		counter("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", func(s core.Stats) float64 { return float64(s.SpecAcceptedTokens) })
		for i := range k {
			pl := prometheus.Labels{"position": strconv.Itoa(i)}
			for k, v := range labels {
				pl[k] = v
			}
			m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:spec_decode_num_accepted_tokens_per_pos_total",
				Help: "Accepted tokens per draft position.", ConstLabels: pl},
				func() float64 {
					s := eng.Stats()
					if i < len(s.SpecAcceptedPerPos) {
						return float64(s.SpecAcceptedPerPos[i])
					}
					return 0
				}))
		}
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig",
		ConstLabels: prometheus.Labels{"engine": "0", "block_size": strconv.Itoa(st.BlockSize), "num_gpu_blocks": strconv.Itoa(st.NumBlocks),
			"num_state_slots": strconv.Itoa(st.NumStateSlots), "enable_prefix_caching": "False", "cache_dtype": "auto"}})
	info.Set(1)
	m.reg.MustRegister(info)

	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels}, []string{"finished_reason"})
	m.reg.MustRegister(m.success)
	for _, r := range finishReasons {
		m.success.WithLabelValues(r)
	}
	m.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
	m.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
	m.tpot = hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.", itlBuckets)
	m.reqTPOT = hist("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", itlBuckets)
	m.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", latencyBuckets)
	m.queue = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", latencyBuckets)
	m.inference = hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", latencyBuckets)
	m.prefill = hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", latencyBuckets)
	m.decode = hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", latencyBuckets)
	m.prefillPerTok = hist("vllm:time_per_prefill_token_request_seconds", "Histogram of time spent in PREFILL phase per prompt token.", itlBuckets)
	b := buckets125(maxModelLen)
	m.promptToks = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", b)
	m.genToks = hist("vllm:request_generation_tokens", "Number of generation tokens processed.", b)
	m.maxGenToks = hist("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", b)
	m.paramsN = hist("vllm:request_params_n", "Histogram of the n request parameter.", nBuckets)
	m.paramsMax = hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", b)
	m.iterTokens = hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", iterBuckets)
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// onStep observes one engine step.
func (m *metrics) onStep(st core.StepStats) {
	if st.NumTokens > 0 {
		m.iterTokens.Observe(float64(st.NumTokens))
	}
}

// requestStarted observes one sequence's parameters.
func (m *metrics) requestStarted(p sampling.Params) {
	if p.MaxTokens != nil {
		m.paramsMax.Observe(float64(*p.MaxTokens))
		m.maxGenToks.Observe(float64(*p.MaxTokens))
	}
}

// requestParamsN observes a request's n.
func (m *metrics) requestParamsN(n int) { m.paramsN.Observe(float64(n)) }

// observeITL records one inter-token gap.
func (m *metrics) observeITL(d time.Duration) {
	m.itl.Observe(d.Seconds())
	m.tpot.Observe(d.Seconds())
}

// requestFinished records a finished sequence.
func (m *metrics) requestFinished(reason string, mt *core.Metrics, p sampling.Params) {
	m.success.WithLabelValues(reason).Inc()
	if mt == nil {
		return
	}
	if !mt.FirstToken.IsZero() {
		m.ttft.Observe(mt.TTFT().Seconds())
	}
	m.e2e.Observe(mt.E2E().Seconds())
	if !mt.FirstScheduled.IsZero() {
		m.queue.Observe(mt.QueueTime().Seconds())
	}
	if !mt.FirstToken.IsZero() {
		m.prefill.Observe(mt.PrefillTime().Seconds())
		m.decode.Observe(mt.DecodeTime().Seconds())
		m.inference.Observe(mt.InferenceTime().Seconds())
		if mt.PromptTokens > 0 {
			m.prefillPerTok.Observe(mt.PrefillTime().Seconds() / float64(mt.PromptTokens))
		}
	}
	if mt.GenerationTokens >= 2 {
		m.reqTPOT.Observe(mt.MeanTPOT().Seconds())
	}
	m.promptToks.Observe(float64(mt.PromptTokens))
	m.genToks.Observe(float64(mt.GenerationTokens))
}
