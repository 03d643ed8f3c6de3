//go:build !cgo

package cuda

import "errors"

// Without cgo there is no way to call the driver: probe says why, New
// fails with it, and the shim functions below (never reached) fail too.

var errNoCgo = errors.New("this binary was built with CGO_ENABLED=0 and cannot load libcuda.so.1: rebuild with cgo")

// probe cannot call the driver without cgo.
func probe() (int, int, error) { return 0, 0, errNoCgo }

func shimSymbols() []symbolInfo                                   { return nil }
func shimConstants() map[string][2]int                            { return nil }
func drvDeviceGet(int) (int, error)                               { return 0, errNoCgo }
func drvDeviceName(int) string                                    { return "" }
func drvDeviceAttr(int, int) (int, error)                         { return 0, errNoCgo }
func drvTotalMem(int) (int64, error)                              { return 0, errNoCgo }
func drvPrimaryCtxRetain(int) (uintptr, error)                    { return 0, errNoCgo }
func drvPrimaryCtxRelease(int) error                              { return errNoCgo }
func drvStreamCreate(uintptr) (uintptr, error)                    { return 0, errNoCgo }
func drvStreamSync(uintptr, uintptr) error                        { return errNoCgo }
func drvStreamDestroy(uintptr, uintptr) error                     { return errNoCgo }
func drvMemGetInfo(uintptr) (int64, int64, error)                 { return 0, 0, errNoCgo }
func drvHasAsyncAlloc() bool                                      { return false }
func drvMemAlloc(uintptr, int, uintptr, bool) (uint64, error)     { return 0, errNoCgo }
func drvMemFree(uintptr, uint64, uintptr, bool) error             { return errNoCgo }
func drvMemPoolKeep(uintptr, int) error                           { return errNoCgo }
func drvMemPoolTrim(uintptr, int) error                           { return errNoCgo }
func drvHtoD(uintptr, uint64, []byte, uintptr) error              { return errNoCgo }
func drvDtoH(uintptr, []byte, uint64, uintptr) error              { return errNoCgo }
func drvDtoD(uintptr, uint64, uint64, int, uintptr) error         { return errNoCgo }
func drvMemsetD8(uintptr, uint64, byte, int, uintptr) error       { return errNoCgo }
func drvMemsetD16(uintptr, uint64, uint16, int, uintptr) error    { return errNoCgo }
func drvMemsetD32(uintptr, uint64, uint32, int, uintptr) error    { return errNoCgo }
func drvModuleLoad(uintptr, []byte) (uintptr, error)              { return 0, errNoCgo }
func drvModuleFunction(uintptr, uintptr, string) (uintptr, error) { return 0, errNoCgo }
func drvFuncMaxShared(uintptr, uintptr, int) error                { return errNoCgo }
func drvLaunch(uintptr, uintptr, [3]uint32, [3]uint32, uint32, uintptr, []uint64, bool) error {
	return errNoCgo
}
func drvHasLaunchEx() bool                                        { return false }
func drvEventCreate(uintptr) (uintptr, error)                     { return 0, errNoCgo }
func drvEventRecord(uintptr, uintptr, uintptr) error              { return errNoCgo }
func drvEventSync(uintptr, uintptr) error                         { return errNoCgo }
func drvEventElapsed(uintptr, uintptr, uintptr) (float32, error)  { return 0, errNoCgo }
func drvEventDestroy(uintptr, uintptr) error                      { return errNoCgo }
func drvHasGraphs() bool                                          { return false }
func drvBeginCapture(uintptr, uintptr) error                      { return errNoCgo }
func drvEndCapture(uintptr, uintptr) (uintptr, error)             { return 0, errNoCgo }
func drvGraphLaunch(uintptr, uintptr, uintptr) error              { return errNoCgo }
func drvGraphUpload(uintptr, uintptr, uintptr) error              { return errNoCgo }
func drvGraphExecDestroy(uintptr, uintptr) error                  { return errNoCgo }
func drvGraphMem(uintptr, int) (int64, int64, error)              { return 0, 0, errNoCgo }
func drvGraphMemTrim(uintptr, int) error                          { return errNoCgo }
func nvrtcLoad() (string, error)                                  { return "", errNoCgo }
func nvrtcVersion() (int, int, error)                             { return 0, 0, errNoCgo }
func nvrtcBuild(string, string, []string) ([]byte, string, error) { return nil, "", errNoCgo }
func ltLoad() (string, error)                                     { return "", errNoCgo }
func ltVersion() int                                              { return 0 }
func ltCreate(uintptr) (uintptr, error)                           { return 0, errNoCgo }
func ltDestroy(uintptr)                                           {}
func ltPlanCreate(uintptr, uintptr, bool, bool, int, int, int, int, int, int, int, int, int, int, int, int, uint64, uint64) (uintptr, error) {
	return 0, errNoCgo
}
func ltPlanRun(uintptr, uintptr, uintptr, float32, float32, uint64, uint64, uint64, uint64, uint64, uint64, int, uintptr) error {
	return errNoCgo
}
func ltPlanDestroy(uintptr) {}
