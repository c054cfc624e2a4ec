//go:build linux

package mptcppm

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// requestTimeout bounds one request's send and reply: the path manager
// answers in microseconds; a socket that stays silent is not waited on for
// ever.
const requestTimeout = 10 * time.Second

// dialSocket opens a netlink socket of proto in the calling thread's
// network namespace (requests made later from any thread stay there), with
// the kernel's extended error messages and a timeout on each request.
func dialSocket(proto int) (*nl.SocketHandle, error) {
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), proto)
	if err != nil {
		return nil, err
	}
	tv := unix.NsecToTimeval(requestTimeout.Nanoseconds())
	if err := errors.Join(s.SetSendTimeout(&tv), s.SetReceiveTimeout(&tv), s.SetExtAck(true)); err != nil {
		s.Close()
		return nil, err
	}
	return &nl.SocketHandle{Socket: s}, nil
}

// execute sends one request of type typ on sh and returns the payloads of
// the replies (a dump's parts until its end, or the one reply; with
// NLM_F_ACK the kernel's error, if any).
func execute(sh *nl.SocketHandle, proto int, typ uint16, flags int, data ...[]byte) ([][]byte, error) {
	req := nl.NewNetlinkRequest(int(typ), flags)
	req.Sockets = map[int]*nl.SocketHandle{proto: sh}
	for _, d := range data {
		req.AddRawData(d)
	}
	return req.Execute(proto, 0)
}

// family resolves the mptcp_pm generic netlink family (its id, version
// and multicast groups are global, not per namespace).
func family() (*vnl.GenlFamily, error) {
	f, err := vnl.GenlFamilyGet(FamilyName)
	if err != nil {
		return nil, fmt.Errorf("family %s: %w", FamilyName, err)
	}
	return f, nil
}

// Conn is a connection to the MPTCP path manager. It is safe for
// concurrent use (requests on the socket are serialised).
type Conn struct {
	sh      *nl.SocketHandle
	id      uint16
	version uint8
}

// Dial opens a generic netlink socket in the calling thread's network
// namespace and resolves the mptcp_pm family. It fails with an error
// wrapping the kernel's ENOENT when the kernel has no MPTCP.
func Dial() (*Conn, error) {
	f, err := family()
	if err != nil {
		return nil, opError("get-family", err)
	}
	sh, err := dialSocket(unix.NETLINK_GENERIC)
	if err != nil {
		return nil, opError("dial", err)
	}
	return &Conn{sh: sh, id: f.ID, version: uint8(f.Version)}, nil
}

// Close closes the socket.
func (c *Conn) Close() error { c.sh.Close(); return nil }

// execute runs one command and returns the attributes of each reply
// (after the generic netlink header).
func (c *Conn) execute(cmd uint8, flags int, attrs []byte) ([][]byte, error) {
	hdr := (&nl.Genlmsg{Command: cmd, Version: c.version}).Serialize()
	msgs, err := execute(c.sh, unix.NETLINK_GENERIC, c.id, flags, hdr, attrs)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, 0, len(msgs))
	for _, m := range msgs {
		if len(m) < nl.SizeofGenlmsg {
			return nil, fmt.Errorf("reply of %d bytes", len(m))
		}
		out = append(out, m[nl.SizeofGenlmsg:])
	}
	return out, nil
}

// Endpoints lists the configured endpoints (`ip mptcp endpoint show`).
func (c *Conn) Endpoints() ([]Endpoint, error) {
	msgs, err := c.execute(cmdGetAddr, unix.NLM_F_DUMP, nil)
	if err != nil {
		return nil, opError("get-addr", err)
	}
	var out []Endpoint
	for _, m := range msgs {
		eps, err := decodeEndpoints(m)
		if err != nil {
			return nil, opError("get-addr", err)
		}
		out = append(out, eps...)
	}
	return out, nil
}

// Add creates an endpoint with e's address, flags and interface (ID 0 lets
// the kernel choose one).
func (c *Conn) Add(e Endpoint) error {
	_, err := c.execute(cmdAddAddr, unix.NLM_F_ACK, serialize(encodeEndpoint(e, true)))
	return opError("add-addr", err)
}

// Delete removes the endpoint with e's ID (the kernel looks endpoints up by
// ID for deletion).
func (c *Conn) Delete(e Endpoint) error {
	_, err := c.execute(cmdDelAddr, unix.NLM_F_ACK, serialize(encodeEndpoint(Endpoint{ID: e.ID}, false)))
	return opError("del-addr", err)
}

// SetFlags changes the backup (and fullmesh) flags of the endpoint with
// addr; the kernel sends MP_PRIO on established subflows from that address,
// so the change applies to running connections at once.
func (c *Conn) SetFlags(e Endpoint) error {
	_, err := c.execute(cmdSetFlags, unix.NLM_F_ACK, serialize(encodeEndpoint(Endpoint{Addr: e.Addr, Port: e.Port, Flags: e.Flags}, true)))
	return opError("set-flags", err)
}

// SetLimits sets the path manager's limits (`ip mptcp limits set`).
func (c *Conn) SetLimits(l Limits) error {
	_, err := c.execute(cmdSetLimits, unix.NLM_F_ACK, serialize(
		nl.NewRtAttr(attrRcvAddAddrs, nl.Uint32Attr(l.AddAddrAccepted)), nl.NewRtAttr(attrSubflows, nl.Uint32Attr(l.Subflows))))
	return opError("set-limits", err)
}

// Limits reads the path manager's limits.
func (c *Conn) Limits() (Limits, error) {
	msgs, err := c.execute(cmdGetLimits, 0, nil)
	if err != nil {
		return Limits{}, opError("get-limits", err)
	}
	if len(msgs) == 0 {
		return Limits{}, opError("get-limits", errEmptyReply)
	}
	l, err := decodeLimits(msgs[0])
	return l, opError("get-limits", err)
}

// SetSubflowBackup flags (or clears) backup on one subflow of the
// connection with token, from this host's side: the kernel sends MP_PRIO to
// the peer and this host's scheduler stops sending on the subflow while a
// non-backup one is up. It needs the userspace path manager in the
// namespace; ports select the exact subflow.
func (c *Conn) SetSubflowBackup(token uint32, local, remote netip.AddrPort, backup bool) error {
	b, err := encodeSubflowFlags(token, local, remote, backup)
	if err != nil {
		return opError("set-flags", err)
	}
	_, err = c.execute(cmdSetFlags, unix.NLM_F_ACK, b)
	return opError("set-flags", err)
}

// Monitor receives path-manager events. While it is open the kernel counts
// a listener on the events group, which the userspace path manager needs
// to accept MP_JOINs.
type Monitor struct {
	s        *nl.NetlinkSocket
	mu       sync.Mutex
	deadline time.Time
}

// DialMonitor opens a generic netlink socket in the calling thread's
// network namespace and joins the mptcp_pm events group.
func DialMonitor() (*Monitor, error) {
	f, err := family()
	if err != nil {
		return nil, opError("monitor", err)
	}
	for _, g := range f.Groups {
		if g.Name != EventsGroup {
			continue
		}
		s, err := nl.SubscribeAt(netns.None(), netns.None(), unix.NETLINK_GENERIC)
		if err != nil {
			return nil, opError("monitor", err)
		}
		// The group's id is dynamic and may lie beyond the 32 groups a
		// bind can name: join it by socket option.
		if err := unix.SetsockoptInt(s.GetFd(), unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, int(g.ID)); err != nil {
			s.Close()
			return nil, opError("monitor", fmt.Errorf("join group %s: %w", EventsGroup, err))
		}
		return &Monitor{s: s}, nil
	}
	return nil, opError("monitor", fmt.Errorf("family %s has no group %s", FamilyName, EventsGroup))
}

// SetReadDeadline bounds the next Receive, so a caller can check its
// context between waits; Receive then fails with os.ErrDeadlineExceeded.
func (m *Monitor) SetReadDeadline(t time.Time) error {
	m.mu.Lock()
	m.deadline = t
	m.mu.Unlock()
	return nil
}

// Receive waits for the next batch of events. An event that does not
// decode is returned as an error after the ones that did.
func (m *Monitor) Receive() ([]Event, error) {
	m.mu.Lock()
	deadline := m.deadline
	m.mu.Unlock()
	if !deadline.IsZero() {
		d := time.Until(deadline)
		if d <= 0 {
			return nil, opError("monitor", os.ErrDeadlineExceeded)
		}
		tv := unix.NsecToTimeval(d.Nanoseconds())
		if err := m.s.SetReceiveTimeout(&tv); err != nil {
			return nil, opError("monitor", err)
		}
	}
	msgs, _, err := m.s.Receive()
	if errors.Is(err, unix.EAGAIN) {
		err = os.ErrDeadlineExceeded // how the library reports its timeout
	}
	if err != nil {
		return nil, opError("monitor", err)
	}
	out := make([]Event, 0, len(msgs))
	for _, msg := range msgs {
		if msg.Header.Type == unix.NLMSG_ERROR || msg.Header.Type == unix.NLMSG_DONE || len(msg.Data) < nl.SizeofGenlmsg {
			continue
		}
		ev, err := decodeEvent(msg.Data[0], msg.Data[nl.SizeofGenlmsg:])
		if err != nil {
			return out, opError("monitor", err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// Close leaves the group; under the userspace path manager new joins are
// refused from then on.
func (m *Monitor) Close() error { m.s.Close(); return nil }

// Diag lists MPTCP subflows through sock_diag, the one place the kernel
// shows both ends' backup flags of each subflow.
type Diag struct {
	sh *nl.SocketHandle
}

// DialDiag opens a NETLINK_SOCK_DIAG socket in the calling thread's
// network namespace. Reading the MPTCP part needs CAP_NET_ADMIN.
func DialDiag() (*Diag, error) {
	sh, err := dialSocket(unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, opError("sock-diag", err)
	}
	return &Diag{sh: sh}, nil
}

// Close closes the socket.
func (d *Diag) Close() error { d.sh.Close(); return nil }

// Subflows returns the established MPTCP subflows (IPv4 and IPv6).
func (d *Diag) Subflows() ([]Subflow, error) {
	var out []Subflow
	for _, family := range []uint8{afInet, afInet6} {
		msgs, err := execute(d.sh, unix.NETLINK_SOCK_DIAG, sockDiagByFamily, unix.NLM_F_DUMP, diagRequest(family))
		if err != nil {
			return nil, opError("sock-diag", err)
		}
		for _, m := range msgs {
			s, ok, err := parseDiag(m)
			if err != nil {
				return nil, opError("sock-diag", err)
			}
			if ok {
				out = append(out, s)
			}
		}
	}
	return out, nil
}
