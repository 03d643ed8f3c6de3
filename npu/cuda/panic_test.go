package cuda

import (
	"strings"
	"testing"
)

// wantPanic fails t unless call panics with a string containing want (the
// ops' argument checks).
func wantPanic(t *testing.T, want string, call func()) {
	t.Helper()
	defer func() {
		r := recover()
		msg, _ := r.(string)
		if r == nil || !strings.Contains(msg, want) {
			t.Fatalf("panic %v, want one containing %q", r, want)
		}
	}()
	call()
}
