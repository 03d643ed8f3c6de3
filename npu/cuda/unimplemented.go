package cuda

// The ops this build of the CUDA backend does not implement. Open
// refuses to open the backend while this list is not empty, so
// --device cuda never runs a partial backend. Every op of npu.Ops is
// implemented today; the list stays as the guard for ops added to the
// interface later.
var unimplementedOps []string
