package ascend

import "strings"

// Preset maps an aclrtGetSocName string to the device-memory preset the
// planner knows (engine/config: atlas-800-a2, atlas-800-a3, 950dt), "" for
// an unknown SoC. Names are matched by prefix, never by equality, as
// torch_npu does (ascend-api.md §2 "SoC names"): Ascend910B* is A2 (910B),
// Ascend910_93* is A3 (910C), Ascend950* is 950.
func Preset(soc string) string {
	switch {
	case strings.HasPrefix(soc, "Ascend910B"):
		return "atlas-800-a2"
	case strings.HasPrefix(soc, "Ascend910_93"):
		return "atlas-800-a3"
	case strings.HasPrefix(soc, "Ascend950"):
		return "950dt"
	}
	return ""
}
