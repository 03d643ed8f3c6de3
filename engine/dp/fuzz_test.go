package dp

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/engine/worker"
	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu/cpu"
)

// fuzzSettings are the head's settings in the fuzz targets.
var fuzzSettings = Settings{ModelConfigHash: strings.Repeat("ab", 32), TensorParallelSize: 1, DataParallelSize: 3,
	MaxModelLen: 4096, BlockSize: 64, MaxNumSeqs: 8, MaxNumBatchedTokens: 2048, Dtype: "bfloat16",
	KVCacheDtype: "auto", LoadFormat: "auto", Device: "cpu"}

// fuzzHead is a head of 3 DP ranks (TP 1), rank 0 its own, without
// listener or rank processes: what the control-plane handlers touch.
// state 1 makes it a failed group, 2 a closing one.
func fuzzHead(state uint8) *Head {
	h := &Head{cfg: HeadConfig{Settings: fuzzSettings, Local: 1, Address: "127.0.0.1", HeartbeatInterval: time.Second},
		flights: map[string]*flight{}, deadCh: make(chan struct{}), readyCh: make(chan struct{}, 1)}
	h.cfg.Spec.Topology = worker.Topology{DP: 3, TP: 1}
	for d := range 3 {
		h.ranks = append(h.ranks, &rankState{dp: d})
	}
	r0 := h.ranks[0]
	r0.node, r0.host, r0.joined, r0.own, r0.lastBeat = "127.0.0.1, the head", "127.0.0.1", true, true, time.Now()
	switch state % 3 {
	case 1:
		h.dead = errors.New("DP rank 2 stopped")
	case 2:
		h.closing = true
	}
	return h
}

func mustJSON(f *testing.F, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// FuzzHeadRPC posts arbitrary join, ready and heartbeat bodies (in that
// order, to one head) to the head's control-plane handlers. They must
// never panic; each answers 200 with its response, or a 4xx/503 with a
// JSON error that says what is wrong; the head's view of its ranks stays
// consistent (ready ranks joined, the head's own rank untouched).
func FuzzHeadRPC(f *testing.F) {
	join := mustJSON(f, JoinRequest{DPRank: 1, Node: "10.0.0.2", Host: "10.0.0.2", Settings: fuzzSettings})
	ready := mustJSON(f, ReadyRequest{DPRank: 1, NumBlocks: 64, SettingsHash: fuzzSettings.Hash(), Endpoint: "http://10.0.0.2:8100",
		Stats: &core.Stats{NumBlocks: 64, FinishedByReason: map[string]int64{"stop": 1}}})
	beat := mustJSON(f, HeartbeatRequest{Node: "10.0.0.2", Ranks: []RankLoad{{DPRank: 1, Waiting: 2, Running: 3, Stats: &core.Stats{}}}})
	other := fuzzSettings
	other.MaxModelLen = 8192
	f.Add(uint8(0), join, ready, beat)
	f.Add(uint8(1), join, ready, beat)
	f.Add(uint8(2), join, ready, beat)
	f.Add(uint8(0), mustJSON(f, JoinRequest{DPRank: 0, Node: "x", Settings: fuzzSettings}), mustJSON(f, ReadyRequest{DPRank: 0, SettingsHash: fuzzSettings.Hash()}), []byte(`{"ranks": [{"dp_rank": -1}, {"dp_rank": 7}, {"dp_rank": 0}]}`))
	f.Add(uint8(0), mustJSON(f, JoinRequest{DPRank: 2, Node: "y", Settings: other}), mustJSON(f, ReadyRequest{DPRank: 2, SettingsHash: other.Hash()}), []byte(`{"node": "y"}`))
	f.Add(uint8(0), []byte(`{"dp_rank": 1e99}`), []byte(`{"dp_rank": -5}`), []byte(`{"ranks": {}}`))
	f.Add(uint8(0), []byte(`{"dp_rank": 1, "settings": {"max_model_len": "x"}}`), []byte(`{"dp_rank": 1, "stats": [1]}`), []byte(`null`))
	f.Add(uint8(0), []byte(``), []byte(`{`), []byte(`[]`))
	ri, err := hccl.TCPRootInfo("127.0.0.1:29500")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, state uint8, join, ready, beat []byte) {
		h := fuzzHead(state)
		post := func(name string, body []byte, handle func(http.ResponseWriter, *http.Request), okBody any) int {
			w := httptest.NewRecorder()
			handle(w, httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body)))
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("%s: Content-Type %q", name, ct)
			}
			switch w.Code {
			case http.StatusOK:
				if err := json.Unmarshal(w.Body.Bytes(), okBody); err != nil {
					t.Fatalf("%s: 200 with %q: %v", name, w.Body, err)
				}
			case http.StatusBadRequest, http.StatusConflict, http.StatusServiceUnavailable:
				var e ErrorResponse
				if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" {
					t.Fatalf("%s: %d with %q (%v): want a JSON error", name, w.Code, w.Body, err)
				}
				if w.Code == http.StatusBadRequest && !json.Valid(body) && !strings.HasPrefix(e.Error, "bad ") {
					t.Fatalf("%s: error %q for a body that is not JSON", name, e.Error)
				}
			default:
				t.Fatalf("%s: status %d", name, w.Code)
			}
			return w.Code
		}
		var jr JoinResponse
		post("join", join, func(w http.ResponseWriter, r *http.Request) { h.handleJoin(w, r, ri) }, &jr)
		var rr, hr HeartbeatResponse
		if post("ready", ready, h.handleReady, &rr) == http.StatusOK && rr.State != "ok" {
			t.Fatalf("ready state %q", rr.State)
		}
		if post("heartbeat", beat, h.handleHeartbeat, &hr) == http.StatusOK {
			switch hr.State {
			case "ok", "failed", "shutdown":
			default:
				t.Fatalf("heartbeat state %q", hr.State)
			}
		}
		if len(h.ranks) != 3 {
			t.Fatalf("%d ranks", len(h.ranks))
		}
		for d, r := range h.ranks {
			if r.dp != d || r.ready && !r.joined || r.own != (d == 0) {
				t.Fatalf("rank %d: %+v", d, r)
			}
		}
		if r0 := h.ranks[0]; r0.node != "127.0.0.1, the head" || r0.host != "127.0.0.1" {
			t.Fatalf("the head's rank changed: %+v", r0)
		}
		_ = h.Status()
		_ = h.Stats()
		_ = h.missing()
	})
}

var (
	closedOnce sync.Once
	closedEng  *core.Engine
	closedErr  error
)

// closedEngine is an engine of the tiny fixture, closed: Add validates a
// request fully (ids, sampling parameters, lengths, the sampler) and then
// answers ErrClosed, so that a fuzz iteration runs no model step.
func closedEngine(t testing.TB) *core.Engine {
	closedOnce.Do(func() {
		m, err := glm5next.Load(cpu.New(1), "../../testdata/glm5next/tiny", glm5next.LoadOptions{})
		if err != nil {
			closedErr = err
			return
		}
		closedEng, closedErr = core.New(m.Engine(), core.Options{MaxNumSeqs: 4, BlockSize: 16, NumBlocks: 64, MaxModelLen: 256, EOSTokenIDs: []int32{1}})
		if closedErr == nil {
			closedEng.Close()
		}
	})
	if closedErr != nil {
		t.Fatal(closedErr)
	}
	return closedEng
}

// FuzzServeGenerate posts arbitrary bodies to a headless node's request
// handler (PathGenerate): it must never panic, and a body it cannot run
// gets a 400 whose text says why (the head relays it as the request's
// error). The engine is closed, so every body ends in an error: a bad
// one's, or ErrClosed once it passed validation.
func FuzzServeGenerate(f *testing.F) {
	f.Add(mustJSON(f, core.Request{ID: "cmpl-1", PromptTokens: []int32{5, 6, 7}}))
	temp, topP, minP, rep, seed, maxTok, lp, topK := 0.7, 0.9, 0.05, 1.1, uint64(7), 16, 2, 20
	f.Add(mustJSON(f, core.Request{ID: "cmpl-2", PromptTokens: []int32{5, 6, 7}, Arrival: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Params: sampling.Params{N: 1, Temperature: &temp, TopP: &topP, TopK: &topK, MinP: &minP, RepetitionPenalty: &rep,
			PresencePenalty: 0.5, FrequencyPenalty: 0.5, Seed: &seed, StopTokenIDs: []int32{2, 3}, MinTokens: 2,
			MaxTokens: &maxTok, Logprobs: &lp, LogitBias: map[int32]float64{5: 1.5}}}))
	f.Add([]byte(`{"ID": "x", "PromptTokens": [1], "Params": {"Temperature": -1, "TopK": -2, "LogitBias": {"99999": 1e300}, "Logprobs": 100000}}`))
	f.Add([]byte(`{"ID": "", "PromptTokens": [1]}`))
	f.Add([]byte(`{"ID": "x", "PromptTokens": [99999]}`))
	f.Add([]byte(`{"ID": "x", "PromptTokens": [-1]}`))
	f.Add([]byte(`{"ID": "x", "PromptTokens": [1], "Params": {"N": 4}}`))
	f.Add([]byte(`{"ID": "x", "PromptTokens": [1], "Params": {"MaxTokens": 100000}}`))
	f.Add([]byte(`{"ID": 3}`))
	f.Add([]byte(`{`))
	eng := closedEngine(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		serveGenerate(w, httptest.NewRequest(http.MethodPost, PathGenerate+"?dp_rank=1", bytes.NewReader(body)), eng, func(error) int { return 1 })
		if w.Code != http.StatusBadRequest {
			t.Fatalf("status %d for a closed engine: %q", w.Code, w.Body)
		}
		msg := strings.TrimSpace(w.Body.String())
		if msg == "" {
			t.Fatal("400 without a reason")
		}
		var req core.Request
		if json.Unmarshal(body, &req) != nil && !strings.HasPrefix(msg, "bad request: ") {
			// The handler refuses trailing data as json.Unmarshal does.
			t.Fatalf("a body that does not decode answered %q", msg)
		}
	})
}
