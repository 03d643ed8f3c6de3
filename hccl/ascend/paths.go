package ascend

import "github.com/npuserve/npuserve/npu/ascend/acl"

// SearchDirs lists the directories searched for the CANN libraries, in
// order (see acl.SearchDirs, the one statement of it, shared with the
// Ascend backend).
func SearchDirs() []string { return acl.SearchDirs() }

// findLib returns the first dirs/name that exists, else the bare name for
// the dynamic loader to find.
func findLib(name string, dirs []string) string { return acl.FindLib(name, dirs) }
