//go:build linux

package mptcppm

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Conn is a connection to the MPTCP path manager. It is safe for
// concurrent use (the underlying genetlink.Conn serialises requests).
type Conn struct {
	c      *genetlink.Conn
	family genetlink.Family
}

// Dial opens a generic netlink socket in the calling thread's network
// namespace and resolves the mptcp_pm family. It fails with an error
// wrapping the kernel's ENOENT when the kernel has no MPTCP.
func Dial() (*Conn, error) {
	c, err := genetlink.Dial(nil)
	if err != nil {
		return nil, opError("dial", err)
	}
	f, err := c.GetFamily(FamilyName)
	if err != nil {
		c.Close()
		return nil, opError("get-family", err)
	}
	return &Conn{c: c, family: f}, nil
}

// Close closes the socket.
func (c *Conn) Close() error { return c.c.Close() }

func (c *Conn) execute(cmd uint8, flags netlink.HeaderFlags, data []byte) ([]genetlink.Message, error) {
	return c.c.Execute(genetlink.Message{
		Header: genetlink.Header{Command: cmd, Version: c.family.Version},
		Data:   data,
	}, c.family.ID, netlink.Request|flags)
}

// Endpoints lists the configured endpoints (`ip mptcp endpoint show`).
func (c *Conn) Endpoints() ([]Endpoint, error) {
	msgs, err := c.execute(cmdGetAddr, netlink.Dump, nil)
	if err != nil {
		return nil, opError("get-addr", err)
	}
	var out []Endpoint
	for _, m := range msgs {
		eps, err := decodeEndpoints(m.Data)
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
	ae := netlink.NewAttributeEncoder()
	encodeEndpoint(ae, e, true)
	b, err := ae.Encode()
	if err != nil {
		return opError("add-addr", err)
	}
	_, err = c.execute(cmdAddAddr, netlink.Acknowledge, b)
	return opError("add-addr", err)
}

// Delete removes the endpoint with e's ID (the kernel looks endpoints up by
// ID for deletion).
func (c *Conn) Delete(e Endpoint) error {
	ae := netlink.NewAttributeEncoder()
	encodeEndpoint(ae, Endpoint{ID: e.ID}, false)
	b, err := ae.Encode()
	if err != nil {
		return opError("del-addr", err)
	}
	_, err = c.execute(cmdDelAddr, netlink.Acknowledge, b)
	return opError("del-addr", err)
}

// SetFlags changes the backup (and fullmesh) flags of the endpoint with
// addr; the kernel sends MP_PRIO on established subflows from that address,
// so the change applies to running connections at once.
func (c *Conn) SetFlags(e Endpoint) error {
	ae := netlink.NewAttributeEncoder()
	encodeEndpoint(ae, Endpoint{Addr: e.Addr, Port: e.Port, Flags: e.Flags}, true)
	b, err := ae.Encode()
	if err != nil {
		return opError("set-flags", err)
	}
	_, err = c.execute(cmdSetFlags, netlink.Acknowledge, b)
	return opError("set-flags", err)
}

// SetLimits sets the path manager's limits (`ip mptcp limits set`).
func (c *Conn) SetLimits(l Limits) error {
	ae := netlink.NewAttributeEncoder()
	ae.Uint32(attrRcvAddAddrs, l.AddAddrAccepted)
	ae.Uint32(attrSubflows, l.Subflows)
	b, err := ae.Encode()
	if err != nil {
		return opError("set-limits", err)
	}
	_, err = c.execute(cmdSetLimits, netlink.Acknowledge, b)
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
	l, err := decodeLimits(msgs[0].Data)
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
	_, err = c.execute(cmdSetFlags, netlink.Acknowledge, b)
	return opError("set-flags", err)
}

// Monitor receives path-manager events. While it is open the kernel counts
// a listener on the events group, which the userspace path manager needs
// to accept MP_JOINs.
type Monitor struct {
	c *genetlink.Conn
}

// DialMonitor opens a generic netlink socket in the calling thread's
// network namespace and joins the mptcp_pm events group.
func DialMonitor() (*Monitor, error) {
	c, err := genetlink.Dial(nil)
	if err != nil {
		return nil, opError("monitor", err)
	}
	f, err := c.GetFamily(FamilyName)
	if err != nil {
		c.Close()
		return nil, opError("monitor", err)
	}
	for _, g := range f.Groups {
		if g.Name == EventsGroup {
			if err := c.JoinGroup(g.ID); err != nil {
				c.Close()
				return nil, opError("monitor", err)
			}
			return &Monitor{c: c}, nil
		}
	}
	c.Close()
	return nil, opError("monitor", fmt.Errorf("family %s has no group %s", FamilyName, EventsGroup))
}

// SetReadDeadline bounds the next Receive, so a caller can check its
// context between waits.
func (m *Monitor) SetReadDeadline(t time.Time) error { return m.c.SetReadDeadline(t) }

// Receive waits for the next batch of events. An event that does not
// decode is returned as an error after the ones that did.
func (m *Monitor) Receive() ([]Event, error) {
	msgs, _, err := m.c.Receive()
	if err != nil {
		return nil, opError("monitor", err)
	}
	out := make([]Event, 0, len(msgs))
	for _, msg := range msgs {
		ev, err := decodeEvent(msg.Header.Command, msg.Data)
		if err != nil {
			return out, opError("monitor", err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// Close leaves the group; under the userspace path manager new joins are
// refused from then on.
func (m *Monitor) Close() error { return m.c.Close() }

// Diag lists MPTCP subflows through sock_diag, the one place the kernel
// shows both ends' backup flags of each subflow.
type Diag struct {
	c *netlink.Conn
}

// DialDiag opens a NETLINK_SOCK_DIAG socket in the calling thread's
// network namespace. Reading the MPTCP part needs CAP_NET_ADMIN.
func DialDiag() (*Diag, error) {
	c, err := netlink.Dial(unix.NETLINK_SOCK_DIAG, nil)
	if err != nil {
		return nil, opError("sock-diag", err)
	}
	return &Diag{c: c}, nil
}

// Close closes the socket.
func (d *Diag) Close() error { return d.c.Close() }

// Subflows returns the established MPTCP subflows (IPv4 and IPv6).
func (d *Diag) Subflows() ([]Subflow, error) {
	var out []Subflow
	for _, family := range []uint8{afInet, afInet6} {
		msgs, err := d.c.Execute(netlink.Message{
			Header: netlink.Header{Type: sockDiagByFamily, Flags: netlink.Request | netlink.Dump},
			Data:   diagRequest(family),
		})
		if err != nil {
			return nil, opError("sock-diag", err)
		}
		for _, m := range msgs {
			s, ok, err := parseDiag(m.Data)
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
