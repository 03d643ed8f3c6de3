package hccl

import (
	"errors"
	"fmt"
)

// kindError is an error message that also matches one of the package's
// sentinel errors (errors.Is) without repeating the sentinel's text.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// errorf formats a message that errors.Is matches against kind.
func errorf(kind error, format string, a ...any) error {
	return &kindError{kind: kind, err: fmt.Errorf(format, a...)}
}

// Errorf formats an error that errors.Is matches against kind (one of this
// package's sentinels) without repeating the sentinel's text; for transport
// implementations.
func Errorf(kind error, format string, a ...any) error { return errorf(kind, format, a...) }

// kindCodes number the sentinel kinds on the wire (abort frames), so a peer
// that fails because another rank aborted still reports the root kind.
var kindCodes = []error{nil, ErrTimeout, ErrPeerLost, ErrPeerAborted, ErrMismatch, ErrInvalid, ErrClosed, ErrBootstrap}

func kindCode(err error) uint8 {
	for i, k := range kindCodes {
		if k != nil && errors.Is(err, k) {
			return uint8(i)
		}
	}
	return 0
}

func kindOf(code uint8) error {
	if int(code) < len(kindCodes) {
		return kindCodes[code]
	}
	return nil
}
