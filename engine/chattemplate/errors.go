package chattemplate

import (
	"errors"
	"fmt"
)

// ErrorKind classifies template errors after the Python exception Jinja2
// would raise.
type ErrorKind uint8

// Error kinds.
const (
	// SyntaxError is a compile error (TemplateSyntaxError).
	SyntaxError ErrorKind = iota + 1
	// UndefinedError: an undefined value was used in an operation that
	// needs a real value (attribute of an undefined, arithmetic, call).
	UndefinedError
	// TypeError: an operation on values of the wrong type.
	TypeError
	// ValueError: a bad value (unpacking, empty separator, ...).
	ValueError
	// TemplateError is raised by the template itself through
	// raise_exception(message); Message is the template's message.
	TemplateError
	// SecurityError: the immutable sandbox refused an operation.
	SecurityError
	// LimitError: a resource limit of [Limits] was exceeded.
	LimitError
	// UnsupportedError: a Jinja2 feature this engine does not implement.
	UnsupportedError
	// RuntimeError is Jinja2's TemplateRuntimeError (e.g. assigning an
	// attribute of something that is not a namespace).
	RuntimeError
	// AttributeError: a Python attribute lookup failed inside a filter.
	AttributeError
	// OverflowError: a number or range is too large (the sandbox's
	// MAX_RANGE, float overflow).
	OverflowError
)

var errorKindNames = map[ErrorKind]string{
	SyntaxError:      "TemplateSyntaxError",
	UndefinedError:   "UndefinedError",
	TypeError:        "TypeError",
	ValueError:       "ValueError",
	TemplateError:    "TemplateError",
	SecurityError:    "SecurityError",
	LimitError:       "LimitError",
	UnsupportedError: "UnsupportedError",
	RuntimeError:     "TemplateRuntimeError",
	AttributeError:   "AttributeError",
	OverflowError:    "OverflowError",
}

// String returns the Python-style name of the kind.
func (k ErrorKind) String() string {
	if s, ok := errorKindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("ErrorKind(%d)", uint8(k))
}

// Error is a compile or render error. Line and Col (1-based, in the
// template source after newline normalisation) are 0 when unknown.
type Error struct {
	Kind    ErrorKind
	Message string
	Line    int
	Col     int
	pos     int // byte offset, -1 when unknown; resolved into Line/Col
}

// Error implements error.
func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("chattemplate: %s at line %d, column %d: %s", e.Kind, e.Line, e.Col, e.Message)
	}
	return fmt.Sprintf("chattemplate: %s: %s", e.Kind, e.Message)
}

// RaisedMessage returns the message of a raise_exception() call when err
// comes from one.
func RaisedMessage(err error) (string, bool) {
	var e *Error
	if errors.As(err, &e) && e.Kind == TemplateError {
		return e.Message, true
	}
	return "", false
}

// newErr returns a render error without a position; the evaluator adds the
// position of the expression that failed.
func newErr(kind ErrorKind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...), pos: -1}
}

// undefErr is the UndefinedError for using v.
func undefErr(v Value) *Error {
	kind := UndefinedError
	if u, _ := v.ref.(*undefInfo); u != nil && u.exc != 0 {
		kind = u.exc
	}
	return &Error{Kind: kind, Message: v.undefinedMessage(), pos: -1}
}

// withPos sets the position of err if it has none.
func withPos(err error, pos int) error {
	var e *Error
	if errors.As(err, &e) && e.pos < 0 {
		e.pos = pos
	}
	return err
}
