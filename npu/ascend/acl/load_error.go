package acl

import "fmt"

// LoadError is a libascendcl.so that did not load (Path as searched; a
// bare name when no search directory had it) or lacks required symbols
// (TooOld).
type LoadError struct {
	Path   string
	Reason string
	TooOld bool
}

func (e *LoadError) Error() string {
	if e.TooOld {
		return fmt.Sprintf("%s is too old or not CANN's: %s", e.Path, e.Reason)
	}
	return fmt.Sprintf("%s does not load: %s", e.Path, e.Reason)
}
