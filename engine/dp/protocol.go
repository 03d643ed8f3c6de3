package dp

import (
	"errors"
	"time"

	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/sampling"
)

// Control-plane paths on the head's RPC port.
const (
	PathJoin      = "/v1/rank/join"
	PathReady     = "/v1/rank/ready"
	PathHeartbeat = "/v1/rank/heartbeat"
	// PathStatus (GET) reports every DP rank's state and load.
	PathStatus = "/v1/dp/status"
	// PathGenerate is served by each headless node on its own port.
	PathGenerate = "/v1/rank/generate"
)

// Defaults of the liveness and start-up timings.
const (
	DefaultHeartbeatInterval = time.Second
	DefaultDeadAfter         = 4 * time.Second
	DefaultHeadTimeout       = 5 * time.Second
	DefaultConnectTimeout    = 60 * time.Second
	DefaultStartTimeout      = 10 * time.Minute
)

// JoinRequest announces a DP rank.
type JoinRequest struct {
	DPRank   int      `json:"dp_rank"`
	Node     string   `json:"node"`
	Host     string   `json:"host"`
	Settings Settings `json:"settings"`
}

// JoinResponse hands a rank what it needs to build its communicators.
type JoinResponse struct {
	// WorldRootInfo is the hccl root info string of the world
	// communicator (DP×TP ranks); engine/worker.Join derives the TP, DP
	// and EP groups from it.
	WorldRootInfo string `json:"world_root_info"`
	DP            int    `json:"dp"`
	TP            int    `json:"tp"`
	EP            bool   `json:"ep"`
	// HeartbeatMS is the heartbeat interval the head expects.
	HeartbeatMS int `json:"heartbeat_ms"`
}

// ReadyRequest reports a loaded rank.
type ReadyRequest struct {
	DPRank       int    `json:"dp_rank"`
	NumBlocks    int    `json:"num_blocks"`
	SettingsHash string `json:"settings_hash"`
	// Endpoint is the base URL of the rank's request server.
	Endpoint string `json:"endpoint"`
	// Stats are the rank's engine statistics at start (capacity).
	Stats *core.Stats `json:"stats,omitempty"`
}

// RankLoad is one DP rank's queue lengths.
type RankLoad struct {
	DPRank  int `json:"dp_rank"`
	Waiting int `json:"waiting"`
	Running int `json:"running"`
	// Stats are the rank's engine statistics (counters included), sent
	// by its TP leader's process.
	Stats *core.Stats `json:"stats,omitempty"`
}

// HeartbeatRequest is a node's or a rank's periodic report (a node's
// main process sends no Ranks: its ranks' leaders report their loads).
type HeartbeatRequest struct {
	Node  string     `json:"node"`
	Ranks []RankLoad `json:"ranks"`
	// Leaving, when set, says why the node's DP ranks (Ranks) are leaving
	// the group: a headless node stopped cleanly (SIGTERM, as docker stop
	// and Kubernetes send) tells the head before its ranks stop, so that
	// the head's 503 names that node rather than the head's own ranks,
	// which the stopping ranks' lockstep close ends cleanly.
	Leaving string `json:"leaving,omitempty"`
}

// HeartbeatResponse tells a node whether the group is still up.
type HeartbeatResponse struct {
	// State is "ok", or "failed" (Reason says why; the node must exit).
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// RankStatus is one DP rank in GroupStatus.
type RankStatus struct {
	DPRank    int    `json:"dp_rank"`
	Node      string `json:"node"`
	Host      string `json:"host"`
	Local     bool   `json:"local"`
	Ready     bool   `json:"ready"`
	NumBlocks int    `json:"num_blocks"`
	Waiting   int    `json:"waiting"`
	Running   int    `json:"running"`
	// Routed counts the requests the head sent to the rank.
	Routed int64 `json:"routed"`
	// PIDs are the process ids of the rank's TP ranks, by TP rank (the
	// head's own DP ranks only).
	PIDs []int `json:"pids,omitempty"`
}

// GroupStatus is the answer of GET /v1/dp/status on the head.
type GroupStatus struct {
	// Failed says why the group failed ("" while it serves).
	Failed string       `json:"failed,omitempty"`
	Ranks  []RankStatus `json:"ranks"`
}

// ErrorResponse is the body of a refused control-plane call.
type ErrorResponse struct {
	Error string `json:"error"`
}

// Requests travel as JSON (sampling.Params' optional fields are pointers,
// and gob would turn a pointer to zero, e.g. temperature 0, into nil);
// outputs as gob, which keeps -Inf logprobs.

// wireOutput is a core.Output on the data plane (errors as text).
type wireOutput struct {
	RequestID    string
	Tokens       []int32
	Logprobs     []sampling.Token
	Finished     bool
	FinishReason string
	HasStop      bool // gob drops a pointer to 0, so the stop token travels by value
	StopToken    int32
	PromptTokens int
	Err          string
	EOS          bool
	Time         time.Time
	Metrics      *core.Metrics
	// RankFailed: the rank's engine failed; Blame is the DP rank its
	// failure points at (the head fails the group blaming it).
	RankFailed bool
	Blame      int
}

func toWire(o core.Output) wireOutput {
	w := wireOutput{RequestID: o.RequestID, Tokens: o.Tokens, Logprobs: o.Logprobs, Finished: o.Finished,
		FinishReason: o.FinishReason, PromptTokens: o.PromptTokens,
		EOS: o.EOS, Time: o.Time, Metrics: o.Metrics}
	if o.StopToken != nil {
		w.HasStop, w.StopToken = true, *o.StopToken
	}
	if o.Err != nil {
		w.Err = o.Err.Error()
	}
	return w
}

func (w wireOutput) output() core.Output {
	o := core.Output{RequestID: w.RequestID, Tokens: w.Tokens, Logprobs: w.Logprobs, Finished: w.Finished,
		FinishReason: w.FinishReason, PromptTokens: w.PromptTokens,
		EOS: w.EOS, Time: w.Time, Metrics: w.Metrics}
	if w.HasStop {
		st := w.StopToken
		o.StopToken = &st
	}
	if w.Err != "" {
		o.Err = errors.New(w.Err)
	}
	return o
}
