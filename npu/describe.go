package npu

// Describer is implemented by backends that can say more about their
// device than DeviceInfo: runtime and driver versions, the SoC, the CPU
// features the kernels dispatch to. `npuserve selftest` prints it first,
// so that a report from a machine we cannot reach says what ran.
type Describer interface {
	// Describe returns name/value pairs (e.g. "cpu_model", "cann",
	// "soc"); keys are lower case with underscores.
	Describe() map[string]string
}

// Describe returns be's description when it is a Describer, else nil.
func Describe(be Backend) map[string]string {
	if d, ok := be.(Describer); ok {
		return d.Describe()
	}
	return nil
}
