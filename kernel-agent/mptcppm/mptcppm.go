// Package mptcppm speaks to the in-kernel MPTCP path manager of mainline
// Linux through its generic netlink family "mptcp_pm" (attributes as in
// include/uapi/linux/mptcp.h and mptcp_pm.h): list, add and flag endpoints
// and set the path manager's limits, as `ip mptcp endpoint|limits` do,
// without a shell-out.
//
// Every operation acts on the network namespace the Conn was dialled in and
// needs CAP_NET_ADMIN there.
//
// The agent speaks netlink through one library, vishvananda/netlink: its
// high-level API covers the rtnetlink work that is costly to write by hand
// (links and addresses for linkwatch, routes, HTB qdiscs and classes, u32
// filters for mptcpshares, veths and namespaces for the tests), and its
// low-level nl package carries the two raw protocols it has no API for
// (generic netlink mptcp_pm here, sock_diag here and in telemetry) with the
// same sockets, requests, acknowledgements and extended errors. The other
// candidate, mdlayher/netlink, has generic netlink but no rtnetlink or
// traffic control, which would have to be encoded by hand.
package mptcppm

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink/nl"
)

// FamilyName is the generic netlink family of the MPTCP path manager.
const FamilyName = "mptcp_pm"

// Commands (enum in uapi mptcp_pm.h).
const (
	cmdAddAddr   = 1
	cmdDelAddr   = 2
	cmdGetAddr   = 3
	cmdSetLimits = 5
	cmdGetLimits = 6
	cmdSetFlags  = 7
)

// Top-level attributes (MPTCP_PM_ATTR_*).
const (
	attrAddr        = 1
	attrRcvAddAddrs = 2
	attrSubflows    = 3
)

// Endpoint attributes (MPTCP_PM_ADDR_ATTR_*).
const (
	addrAttrFamily = 1
	addrAttrID     = 2
	addrAttrAddr4  = 3
	addrAttrAddr6  = 4
	addrAttrPort   = 5
	addrAttrFlags  = 6
	addrAttrIfIdx  = 7
)

// Flags are MPTCP endpoint flags (MPTCP_PM_ADDR_FLAG_*).
type Flags uint32

// Endpoint flags.
const (
	FlagSignal   Flags = 1 << 0
	FlagSubflow  Flags = 1 << 1
	FlagBackup   Flags = 1 << 2
	FlagFullmesh Flags = 1 << 3
	FlagImplicit Flags = 1 << 4
)

// String lists the flags as `ip mptcp endpoint` prints them.
func (f Flags) String() string {
	var s []string
	for _, n := range []struct {
		f    Flags
		name string
	}{{FlagSignal, "signal"}, {FlagSubflow, "subflow"}, {FlagBackup, "backup"}, {FlagFullmesh, "fullmesh"}, {FlagImplicit, "implicit"}} {
		if f&n.f != 0 {
			s = append(s, n.name)
		}
	}
	return strings.Join(s, " ")
}

// Endpoint is one MPTCP endpoint (an address the path manager may use).
type Endpoint struct {
	ID      uint8
	Addr    netip.Addr
	Port    uint16
	Flags   Flags
	IfIndex int32
}

// Limits are the path manager's per-connection limits.
type Limits struct {
	// Subflows is the maximum number of additional subflows.
	Subflows uint32
	// AddAddrAccepted is the maximum number of ADD_ADDR accepted.
	AddAddrAccepted uint32
}

const (
	afInet  = 2
	afInet6 = 10
)

// encodeEndpoint returns e as the nested MPTCP_PM_ATTR_ADDR attribute.
// Addresses are big-endian on the wire (nla_get_in_addr); the other integers
// are host order.
func encodeEndpoint(e Endpoint, withFlags bool) *nl.RtAttr {
	n := nested(attrAddr)
	encodeAddr(n, e.Addr)
	if e.ID != 0 {
		n.AddRtAttr(addrAttrID, nl.Uint8Attr(e.ID))
	}
	if e.Port != 0 {
		n.AddRtAttr(addrAttrPort, nl.Uint16Attr(e.Port))
	}
	if withFlags {
		n.AddRtAttr(addrAttrFlags, nl.Uint32Attr(uint32(e.Flags)))
	}
	if e.IfIndex != 0 {
		n.AddRtAttr(addrAttrIfIdx, nl.Uint32Attr(uint32(e.IfIndex)))
	}
	return n
}

// encodeAddr adds a's family and address to n (nothing for an invalid a).
func encodeAddr(n *nl.RtAttr, a netip.Addr) {
	switch {
	case a.Is4():
		n.AddRtAttr(addrAttrFamily, nl.Uint16Attr(afInet))
		b := a.As4()
		n.AddRtAttr(addrAttrAddr4, b[:])
	case a.Is6():
		n.AddRtAttr(addrAttrFamily, nl.Uint16Attr(afInet6))
		b := a.As16()
		n.AddRtAttr(addrAttrAddr6, b[:])
	}
}

// Bounds of one path-manager reply: the kernel sends one endpoint of
// about 60 bytes per GET_ADDR message and allows at most 255 endpoint IDs;
// anything beyond is not a reply to the agent's request.
const (
	maxReplyBytes = 4096
	maxEndpoints  = 256
)

var errReplyTooLarge = fmt.Errorf("reply larger than %d bytes", maxReplyBytes)

// decodeEndpoints parses the attributes of one GET_ADDR reply. Malformed
// attributes (wrong lengths, truncated nesting) are errors.
func decodeEndpoints(b []byte) ([]Endpoint, error) {
	if len(b) > maxReplyBytes {
		return nil, errReplyTooLarge
	}
	top, err := parseAttrs(b)
	if err != nil {
		return nil, err
	}
	var out []Endpoint
	for _, a := range top {
		if a.typ != attrAddr {
			continue
		}
		if len(out) == maxEndpoints {
			return nil, fmt.Errorf("more than %d endpoints", maxEndpoints)
		}
		e, err := decodeEndpoint(a.data)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func decodeEndpoint(b []byte) (Endpoint, error) {
	attrs, err := parseAttrs(b)
	if err != nil {
		return Endpoint{}, err
	}
	var e Endpoint
	for _, a := range attrs {
		var err error
		switch a.typ {
		case addrAttrID:
			e.ID, err = a.u8()
		case addrAttrAddr4:
			if err = a.exact(4); err == nil {
				e.Addr = netip.AddrFrom4([4]byte(a.data))
			}
		case addrAttrAddr6:
			if err = a.exact(16); err == nil {
				e.Addr = netip.AddrFrom16([16]byte(a.data))
			}
		case addrAttrPort:
			e.Port, err = a.u16()
		case addrAttrFlags:
			var f uint32
			f, err = a.u32()
			e.Flags = Flags(f)
		case addrAttrIfIdx:
			var i uint32
			i, err = a.u32()
			e.IfIndex = int32(i)
		}
		if err != nil {
			return Endpoint{}, err
		}
	}
	return e, nil
}

// decodeLimits parses a GET_LIMITS reply.
func decodeLimits(b []byte) (Limits, error) {
	if len(b) > maxReplyBytes {
		return Limits{}, errReplyTooLarge
	}
	attrs, err := parseAttrs(b)
	if err != nil {
		return Limits{}, err
	}
	var l Limits
	for _, a := range attrs {
		var err error
		switch a.typ {
		case attrRcvAddAddrs:
			l.AddAddrAccepted, err = a.u32()
		case attrSubflows:
			l.Subflows, err = a.u32()
		}
		if err != nil {
			return Limits{}, err
		}
	}
	return l, nil
}

// OpError is the error of one path-manager operation.
type OpError struct {
	Op  string
	Err error
}

func (e *OpError) Error() string { return fmt.Sprintf("mptcp_pm %s: %v", e.Op, e.Err) }

// Unwrap returns the underlying error (often the kernel's errno, a
// syscall.Errno, with its extended ack message).
func (e *OpError) Unwrap() error { return e.Err }

func opError(op string, err error) error {
	if err == nil {
		return nil
	}
	return &OpError{Op: op, Err: err}
}

var errEmptyReply = errors.New("empty reply")
