package hccl

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
)

// RootInfo identifies a communicator before it exists, like HCCL's
// HcclRootInfo: rank 0 creates it, the launcher hands its String() to the
// other ranks (flags, environment, the DP RPC handshake), and every rank
// passes it to Init. It is opaque apart from its transport name.
//
// TCP root infos read "tcp://<host>:<port>/<session>": the root's bootstrap
// address and a random 128-bit session id, so connections from another job
// or a stale launch are rejected. HCCL root infos read "hccl:<base64 of the
// 4108-byte HcclRootInfo>", NCCL ones "nccl:<base64 of the 128-byte
// ncclUniqueId>".
type RootInfo struct {
	transport string
	data      string
}

// MakeRootInfo builds a root info from a transport name and its payload; for
// transport implementations.
func MakeRootInfo(transport, data string) RootInfo {
	return RootInfo{transport: transport, data: data}
}

// Transport is "tcp", "hccl" or "nccl".
func (r RootInfo) Transport() string { return r.transport }

// Data is the transport-specific payload.
func (r RootInfo) Data() string { return r.data }

// IsZero reports whether r is the zero RootInfo.
func (r RootInfo) IsZero() bool { return r.transport == "" }

// String is the serialised form that ParseRootInfo reads back.
func (r RootInfo) String() string {
	if r.transport == "" {
		return ""
	}
	return r.transport + ":" + r.data
}

// ParseRootInfo reads the String() form of a root info.
func ParseRootInfo(s string) (RootInfo, error) {
	s = strings.TrimSpace(s)
	tr, data, ok := strings.Cut(s, ":")
	if !ok || tr == "" || data == "" {
		return RootInfo{}, fmt.Errorf("hccl: root info %q: want <transport>:<data>, e.g. tcp://10.0.0.1:29500/<session>: %w", abbrev(s), ErrInvalid)
	}
	r := RootInfo{transport: tr, data: data}
	regMu.Lock()
	_, registered := transports[tr]
	regMu.Unlock()
	if !registered && tr != TransportHCCL && tr != TransportNCCL {
		return RootInfo{}, fmt.Errorf("hccl: root info %q: unknown transport %q (want tcp, hccl or nccl): %w", abbrev(s), tr, ErrInvalid)
	}
	if tr == TransportTCP {
		if _, _, err := r.tcpAddr(); err != nil {
			return RootInfo{}, err
		}
	}
	return r, nil
}

// abbrev shortens long strings (HCCL root infos are 5.5 KB) in messages.
func abbrev(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// tcpAddr splits a TCP root info into the root's address and the session.
func (r RootInfo) tcpAddr() (addr, session string, err error) {
	if r.transport != TransportTCP {
		return "", "", fmt.Errorf("hccl: not a tcp root info: %q: %w", abbrev(r.String()), ErrInvalid)
	}
	rest, ok := strings.CutPrefix(r.data, "//")
	if ok {
		addr, session, ok = strings.Cut(rest, "/")
	}
	if !ok || addr == "" || len(session) != 32 {
		return "", "", fmt.Errorf("hccl: tcp root info %q: want tcp://<host>:<port>/<32 hex digits>: %w", abbrev(r.String()), ErrInvalid)
	}
	if _, err := hex.DecodeString(session); err != nil {
		return "", "", fmt.Errorf("hccl: tcp root info %q: session is not hex: %w", abbrev(r.String()), ErrInvalid)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" || port == "0" {
		return "", "", fmt.Errorf("hccl: tcp root info %q: bad address %q: %w", abbrev(r.String()), addr, ErrInvalid)
	}
	return addr, session, nil
}

// rootListeners holds the bootstrap listeners opened by NewRootInfo in this
// process, by session, until rank 0's Init takes them. Listening at once
// makes the port known and bound without a probe-then-bind race.
var (
	rootMu        sync.Mutex
	rootListeners = map[string]*net.TCPListener{}
)

// NewRootInfo creates a TCP root info with a fresh session and starts
// listening on listenAddr for the ranks' bootstrap connections; call it on
// rank 0's host, then Init(ri, 0, size, …) in the same process. listenAddr
// is host:port; port 0 picks a free port. The advertised address is
// listenAddr's host, or, when that is unspecified ("", 0.0.0.0, ::), the
// first non-loopback IPv4 address of an interface that is up (loopback if
// there is none). Multi-host launchers should pass the node's address on
// the network the ranks share (the --data-parallel-address).
//
// The listener lives in this process until rank 0's Init here takes it
// (or Release): when rank 0 runs in another process, use TCPRootInfo
// instead.
func NewRootInfo(listenAddr string) (RootInfo, error) {
	if listenAddr == "" {
		listenAddr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return RootInfo{}, fmt.Errorf("hccl: NewRootInfo(%q): %v: %w", listenAddr, err, ErrInvalid)
	}
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return RootInfo{}, fmt.Errorf("hccl: NewRootInfo: listen on %s: %w", listenAddr, err)
	}
	tl := ln.(*net.TCPListener)
	port := tl.Addr().(*net.TCPAddr).Port
	adv := host
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		adv = defaultHostIP()
	}
	session := NewSession()
	rootMu.Lock()
	rootListeners[session] = tl
	rootMu.Unlock()
	return RootInfo{transport: TransportTCP, data: "//" + net.JoinHostPort(adv, fmt.Sprint(port)) + "/" + session}, nil
}

// TCPRootInfo builds a TCP root info for a fixed address (host:port, the
// host as the other ranks reach it) and a fresh session, without
// listening: for a launcher that is not itself rank 0 (the head's
// coordinator handing out communicators of child ranks). Rank 0's Init
// then listens on addr.
func TCPRootInfo(addr string) (RootInfo, error) {
	return ParseRootInfo("tcp://" + addr + "/" + NewSession())
}

// NewSession returns a random 128-bit session id (32 hex digits) for a TCP
// root info built by hand: "tcp://" + addr + "/" + NewSession().
func NewSession() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("hccl: crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// Release closes the bootstrap listener NewRootInfo opened for r if rank 0's
// Init has not taken it (a launch abandoned before Init). Harmless otherwise.
func (r RootInfo) Release() {
	if _, session, err := r.tcpAddr(); err == nil {
		if ln := takeRootListener(session); ln != nil {
			ln.Close()
		}
	}
}

func takeRootListener(session string) *net.TCPListener {
	rootMu.Lock()
	defer rootMu.Unlock()
	ln := rootListeners[session]
	delete(rootListeners, session)
	return ln
}

// defaultHostIP is the first non-loopback IPv4 address of an up interface,
// else 127.0.0.1.
func defaultHostIP() string {
	ifs, err := net.Interfaces()
	if err == nil {
		for _, ifc := range ifs {
			if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
				continue
			}
			addrs, err := ifc.Addrs()
			if err != nil {
				continue
			}
			for _, a := range addrs {
				if ipn, ok := a.(*net.IPNet); ok {
					if ip4 := ipn.IP.To4(); ip4 != nil && !ip4.IsLoopback() && !ip4.IsLinkLocalUnicast() {
						return ip4.String()
					}
				}
			}
		}
	}
	return "127.0.0.1"
}
