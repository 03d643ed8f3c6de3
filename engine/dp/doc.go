// Package dp runs multi-node data-parallel serving: the head node's DP
// coordinator (Head) and the ranks of --headless nodes (RunHeadless),
// joined over --data-parallel-rpc-port (serving-compat.md §3).
//
// Control plane. The head serves HTTP+JSON on the RPC port under
// versioned paths:
//
//	POST /v1/rank/join       a DP rank announces itself (DP rank, node, host,
//	                         Settings); the head checks the settings and answers
//	                         the hccl root info of the world communicator
//	POST /v1/rank/ready      after loading: cache capacity, settings hash and
//	                         the rank's request endpoint
//	POST /v1/rank/heartbeat  every HeartbeatInterval: the rank's queue lengths;
//	                         the answer says whether the group is still up
//	GET  /v1/dp/status       every DP rank's node, readiness and load (operators)
//
// A setting that differs from the head's is rejected with a message naming
// the flag and both values. The ranks then build their communicators from
// the world root info (engine/worker.Join) and load their share of the
// model (worker.Start); with expert parallelism the DP ranks step in
// lockstep (worker.Lockstep), so every rank reaches every collective.
//
// Processes. Every device rank is its own OS process: a node's main
// process (the head or a headless node) re-executes the command with
// RankEnv set once per local device rank (RunRank in the child), and
// supervises the children: one that ends fails its DP rank, and they die
// with the main process (Pdeathsig). The head's own DP ranks report ready
// and heartbeat like remote ones.
//
// Data plane. Each DP rank's TP leader process serves POST
// /v1/rank/generate on an ephemeral port of its host: a JSON core.Request
// in, a stream of gob-encoded outputs back; the head cancels the HTTP
// request to abort.
// Head balances requests over all DP ranks by waiting×4+running (vLLM's
// internal load balancer) and implements the engine interface of
// engine/server.
//
// Liveness. Heartbeats go both ways (the rank's POST and the head's
// answer). A rank missing for DeadAfter, a broken request stream or a
// local rank process that ended makes the head fail
// every request in flight and every new one with 503, naming the rank and
// node. A headless node that cannot reach the head for HeadTimeout, or is
// told the group failed, exits with an error.
package dp
