package ascend

// The ops this build of the Ascend backend does not implement. Open
// refuses to open the backend while this list is not empty, so
// --device ascend never runs a partial backend. Every op of npu.Ops is
// implemented today (against the stand-in CANN: see doc.go for what has
// and has not run); the list stays as the guard for ops added to the
// interface later.
var unimplementedOps []string
