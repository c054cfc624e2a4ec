//go:build linux

package mptcppm

import (
	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
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
