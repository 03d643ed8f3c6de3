package hccl

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/npuserve/npuserve/npu"
)

// Wire format of the TCP transport.
//
// Bootstrap (Init): the connecting side writes the 8-byte magic and then
// control messages (4-byte little-endian length + JSON), the accepting side
// answers with control messages. After Init every connection carries data
// frames: a 24-byte header and the payload (raw little-endian elements; all
// hosts must be little-endian, as x86-64 and aarch64 are).
//
//	0  kind   operation (kAllReduce…) or kAbort / kBye
//	1  phase  round within the operation (reduce-scatter, all-gather)
//	2  dtype  npu.DType
//	3  redop  ReduceOp (abort frames: the failure's kind code)
//	4  aux    u32: Broadcast root
//	8  seq    u64: collective number, or the pair's point-to-point number
//	16 bytes  u64: payload length
//
// The receiver checks every field against what it expects, so ranks that
// call different collectives, or the same one with different arguments,
// fail at once with ErrMismatch and a message naming both sides instead of
// deadlocking or corrupting data.

const (
	wireMagic   = "NPUHCCL1"
	wireVersion = 1
	hdrLen      = 24
	maxCtlBytes = 1 << 20  // control messages are small; anything larger is a stray
	maxMsgBytes = 64 << 10 // abort/bye reasons
)

// Frame kinds.
const (
	kAllReduce uint8 = iota + 1
	kAllGather
	kReduceScatter
	kAllToAll
	kAllToAllV
	kBroadcast
	kBarrier
	kSend
	kAbort uint8 = 0xE0 // payload: the reason; redop: its kind code
	kBye   uint8 = 0xE1 // the peer closed its communicator
)

var kindNames = map[uint8]string{
	kAllReduce: "AllReduce", kAllGather: "AllGather", kReduceScatter: "ReduceScatter",
	kAllToAll: "AllToAll", kAllToAllV: "AllToAllV", kBroadcast: "Broadcast", kBarrier: "Barrier",
	kSend: "Send", kAbort: "abort", kBye: "close",
}

// frame is a data frame header.
type frame struct {
	kind, phase, dtype, redop uint8
	aux                       uint32
	seq, n                    uint64
}

func (f frame) put(b *[hdrLen]byte) {
	b[0], b[1], b[2], b[3] = f.kind, f.phase, f.dtype, f.redop
	binary.LittleEndian.PutUint32(b[4:], f.aux)
	binary.LittleEndian.PutUint64(b[8:], f.seq)
	binary.LittleEndian.PutUint64(b[16:], f.n)
}

func getFrame(b *[hdrLen]byte) frame {
	return frame{kind: b[0], phase: b[1], dtype: b[2], redop: b[3],
		aux: binary.LittleEndian.Uint32(b[4:]), seq: binary.LittleEndian.Uint64(b[8:]), n: binary.LittleEndian.Uint64(b[16:])}
}

// String describes the frame as the call that sent it, for mismatch
// messages.
func (f frame) String() string {
	name, ok := kindNames[f.kind]
	if !ok {
		return fmt.Sprintf("an unknown frame (kind 0x%02x)", f.kind)
	}
	s := name
	if f.kind == kSend {
		s += fmt.Sprintf(" (point-to-point #%d", f.seq)
	} else {
		s += fmt.Sprintf(" #%d (", f.seq)
		if f.phase > 0 {
			s += fmt.Sprintf("round %d, ", f.phase)
		}
	}
	s += npu.DType(f.dtype).String()
	switch f.kind {
	case kAllReduce, kReduceScatter:
		s += " " + ReduceOp(f.redop).String()
	case kBroadcast:
		s += fmt.Sprintf(" root %d", f.aux)
	}
	return s + fmt.Sprintf(", %d bytes)", f.n)
}

// link is the connection between this rank and one peer.
type link struct {
	rank  int    // the peer's rank
	addr  string // the peer's address, for messages
	conn  *net.TCPConn
	br    *bufio.Reader
	whdr  [hdrLen]byte
	rhdr  [hdrLen]byte
	sent  uint64 // point-to-point frames sent to the peer
	recvd uint64 // point-to-point frames received from it
	// wdirty is set when a frame we were writing was cut short: the
	// outgoing stream is out of step and can carry nothing more (not even
	// an abort frame). rdirty is the same for the incoming stream.
	wdirty, rdirty bool
}

func newLink(rank int, conn *net.TCPConn, br *bufio.Reader) *link {
	conn.SetNoDelay(true)
	if br == nil {
		br = bufio.NewReaderSize(conn, 256<<10)
	}
	return &link{rank: rank, addr: conn.RemoteAddr().String(), conn: conn, br: br}
}

// write sends one frame. Callers never write one link from two goroutines.
func (l *link) write(f frame, payload []byte) error {
	f.n = uint64(len(payload))
	f.put(&l.whdr)
	bufs := net.Buffers{l.whdr[:], payload}
	if n, err := bufs.WriteTo(l.conn); err != nil {
		l.wdirty = n > 0 // nothing written: the stream is still in step
		return err
	}
	return nil
}

// read receives one frame into dst, which must match want (with want.n
// the expected payload length).
func (l *link) read(want frame, dst []byte) error {
	if n, err := io.ReadFull(l.br, l.rhdr[:]); err != nil {
		l.rdirty = n > 0
		return err
	}
	got := getFrame(&l.rhdr)
	switch got.kind {
	case kAbort, kBye:
		msg := make([]byte, min(got.n, maxMsgBytes))
		_, err := io.ReadFull(l.br, msg)
		l.rdirty = true // nothing may follow
		if got.kind == kBye {
			return errorf(ErrPeerLost, "rank %d closed its communicator", l.rank)
		}
		if err != nil {
			return errorf(ErrPeerAborted, "rank %d aborted (reason cut short: %v)", l.rank, err)
		}
		return &peerAbort{rank: l.rank, reason: string(msg), kind: kindOf(got.redop)}
	}
	if got != want {
		l.rdirty = true
		if sameButSize(got, want) {
			es := uint64(max(npu.DType(want.dtype).Size(), 1))
			return errorf(ErrMismatch, "size mismatch with rank %d in %v: it sends %d elements, this rank expects %d", l.rank, want, got.n/es, want.n/es)
		}
		return errorf(ErrMismatch, "collective mismatch with rank %d: it sent %v, this rank expected %v", l.rank, got, want)
	}
	if _, err := io.ReadFull(l.br, dst); err != nil {
		l.rdirty = true
		return err
	}
	return nil
}

// sameButSize reports whether two frames differ at most in payload size.
func sameButSize(a, b frame) bool {
	a.n = b.n
	return a == b
}

// peerAbort is a failure another rank reported before giving up.
type peerAbort struct {
	rank   int
	reason string
	kind   error // the kind of the peer's own failure, if known
}

func (e *peerAbort) Error() string { return fmt.Sprintf("rank %d aborted: %s", e.rank, e.reason) }
func (e *peerAbort) Unwrap() []error {
	if e.kind != nil {
		return []error{ErrPeerAborted, e.kind}
	}
	return []error{ErrPeerAborted}
}

// isTimeout reports whether a network error is a deadline expiry.
func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// describeNetErr words a broken connection for people.
func describeNetErr(err error) string {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed by the peer (process exited or was killed, or closed its communicator)"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset by the peer (process killed or crashed?)"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe (the peer is gone)"
	case errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return fmt.Sprintf("network failure: %v", err)
	}
	return err.Error()
}

// ctl is a bootstrap control message.
type ctl struct {
	Type    string   `json:"type"` // join, mesh, addrs, ready, go, ok, abort
	Version int      `json:"version,omitempty"`
	Session string   `json:"session,omitempty"`
	Rank    int      `json:"rank"`
	Size    int      `json:"size,omitempty"`
	Name    string   `json:"name,omitempty"`
	Addr    string   `json:"addr,omitempty"`  // join: the rank's mesh listener
	Addrs   []string `json:"addrs,omitempty"` // addrs: every rank's mesh listener
	Error   string   `json:"error,omitempty"` // abort, ready with a failure
	Kind    uint8    `json:"kind,omitempty"`  // abort, ready: the failure's kind code
	Ranks   []int    `json:"ranks,omitempty"` // abort: the ranks the failure concerns
}

func writeCtl(w io.Writer, m ctl, withMagic bool) error {
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	buf := make([]byte, 0, len(wireMagic)+4+len(body))
	if withMagic {
		buf = append(buf, wireMagic...)
	}
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(body)))
	buf = append(buf, body...)
	_, err = w.Write(buf)
	return err
}

// errStray marks a connection that does not speak the protocol.
var errStray = errors.New("not an npuserve hccl peer")

func readCtl(r *bufio.Reader, withMagic bool) (ctl, error) {
	var m ctl
	if withMagic {
		var magic [len(wireMagic)]byte
		if _, err := io.ReadFull(r, magic[:]); err != nil {
			return m, err
		}
		if string(magic[:]) != wireMagic {
			return m, errStray
		}
	}
	var lb [4]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return m, err
	}
	n := binary.LittleEndian.Uint32(lb[:])
	if n > maxCtlBytes {
		return m, errStray
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return m, err
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return m, fmt.Errorf("%w: bad control message: %v", errStray, err)
	}
	return m, nil
}

// errCancelled ends a bootstrap step that another failure made pointless.
var errCancelled = errors.New("cancelled")

// dialRetry connects to addr, retrying refused connections (the peer may
// not be listening yet) until the deadline or until cancel is closed.
func dialRetry(addr string, deadline time.Time, cancel <-chan struct{}) (*net.TCPConn, error) {
	backoff := 20 * time.Millisecond
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, os.ErrDeadlineExceeded
		}
		d := net.Dialer{Timeout: min(left, 5*time.Second)}
		c, err := d.Dial("tcp", addr)
		if err == nil {
			return c.(*net.TCPConn), nil
		}
		left = time.Until(deadline)
		if left <= 0 {
			return nil, err
		}
		select {
		case <-time.After(min(backoff, left)):
		case <-cancel:
			return nil, errCancelled
		}
		if time.Until(deadline) <= 0 {
			return nil, err
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}
