//go:build !cgo

package acl

import "errors"

// Load fails without cgo: nothing can call libascendcl.so.
func Load(path string) error {
	return errors.New("this binary was built with CGO_ENABLED=0 and cannot load libascendcl.so: rebuild with cgo")
}
