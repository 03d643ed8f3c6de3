package hccltest

import (
	"bufio"
	"bytes"
	"errors"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Child is a process of a multi-process test (usually the test binary
// re-executed as one rank), its stdout read line by line: the protocol
// the transports' process tests speak ("root …", "ready", results).
type Child struct {
	Cmd    *exec.Cmd
	Stderr SyncBuffer
	lines  chan string // stdout; closed at EOF
	done   chan error  // the exit, put back by whoever takes it
}

// StartChild starts cmd (its Stdout and Stderr are the Child's) and kills
// it when the test ends or this process dies.
func StartChild(t testing.TB, cmd *exec.Cmd) *Child {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c := &Child{Cmd: cmd, lines: make(chan string, 16), done: make(chan error, 1)}
	cmd.Stderr = &c.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.done <- cmd.Wait() // after EOF: Wait closes the pipe
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		err := <-c.done
		c.done <- err
	})
	return c
}

// Line returns the child's next stdout line, or "" after limit or at EOF.
func (c *Child) Line(limit time.Duration) string {
	select {
	case l := <-c.lines:
		return l
	case <-time.After(limit):
		return ""
	}
}

// Wait returns the child's exit error and the stdout lines it printed
// after the last one read. A child still running after limit fails the
// test and is killed.
func (c *Child) Wait(t testing.TB, limit time.Duration) (err error, rest []string) {
	t.Helper()
	end := time.After(limit)
	for {
		select {
		case l, ok := <-c.lines:
			if ok {
				rest = append(rest, l)
				continue
			}
			err := <-c.done
			c.done <- err
			return err, rest
		case <-end:
			t.Errorf("child %v still running after %v; stderr:\n%s", c.Cmd.Args, limit, c.Stderr.String())
			c.Cmd.Process.Kill()
			return errors.New("killed"), rest
		}
	}
}

// SyncBuffer is a bytes.Buffer safe to read while a child writes to it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
