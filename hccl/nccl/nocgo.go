//go:build !cgo

package nccl

// Without cgo there is no way to call NCCL: Available says why, and the
// shim functions below (never reached past Available) fail too.

const noCgo = "this binary was built with CGO_ENABLED=0 and cannot load libnccl.so.2: rebuild with cgo"

func libLoad(string) (int, string)                                       { return -1, noCgo }
func libSymbols() []symbolInfo                                           { return nil }
func libVersion() (int, int)                                             { return 0, shimNotLoaded }
func libErrorString(int) string                                          { return "" }
func libLastError(uintptr) string                                        { return "" }
func libUniqueID() ([uniqueIDBytes]byte, int)                            { return [uniqueIDBytes]byte{}, shimNotLoaded }
func libHasConfig() bool                                                 { return false }
func libInit(int, [uniqueIDBytes]byte, int, bool) (uintptr, int)         { return 0, shimNotLoaded }
func libAsyncError(uintptr) int                                          { return shimNotLoaded }
func libFinalize(uintptr) int                                            { return shimNotLoaded }
func libDestroy(uintptr) int                                             { return shimNotLoaded }
func libAbort(uintptr) int                                               { return shimNotLoaded }
func libAllReduce(uintptr, uintptr, int, int, int, uintptr, uintptr) int { return shimNotLoaded }
func libBroadcast(uintptr, uintptr, int, int, int, uintptr, uintptr) int { return shimNotLoaded }
func libReduceScatter(uintptr, uintptr, int, int, int, uintptr, uintptr) int {
	return shimNotLoaded
}
func libAllGather(uintptr, uintptr, int, int, uintptr, uintptr) int { return shimNotLoaded }
func libSend(uintptr, int, int, int, uintptr, uintptr) int          { return shimNotLoaded }
func libRecv(uintptr, int, int, int, uintptr, uintptr) int          { return shimNotLoaded }
func libAllToAllV(uintptr, uintptr, []int, uintptr, uintptr) int    { return shimNotLoaded }
func libConstants() map[string][2]int                               { return nil }
