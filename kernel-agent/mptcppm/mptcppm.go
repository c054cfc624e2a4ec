// Package mptcppm speaks to the in-kernel MPTCP path manager of mainline
// Linux through its generic netlink family "mptcp_pm" (attributes as in
// include/uapi/linux/mptcp.h and mptcp_pm.h): list, add and flag endpoints
// and set the path manager's limits, as `ip mptcp endpoint|limits` do,
// without a shell-out.
//
// Every operation acts on the network namespace the Conn was dialled in and
// needs CAP_NET_ADMIN there.
package mptcppm

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/mdlayher/netlink"
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

// encodeEndpoint writes e as the nested MPTCP_PM_ATTR_ADDR attribute.
// Addresses are big-endian on the wire (nla_get_in_addr); the other integers
// are host order.
func encodeEndpoint(ae *netlink.AttributeEncoder, e Endpoint, withFlags bool) {
	ae.Nested(attrAddr, func(nae *netlink.AttributeEncoder) error {
		switch {
		case e.Addr.Is4():
			nae.Uint16(addrAttrFamily, afInet)
			b := e.Addr.As4()
			nae.Bytes(addrAttrAddr4, b[:])
		case e.Addr.Is6():
			nae.Uint16(addrAttrFamily, afInet6)
			b := e.Addr.As16()
			nae.Bytes(addrAttrAddr6, b[:])
		}
		if e.ID != 0 {
			nae.Uint8(addrAttrID, e.ID)
		}
		if e.Port != 0 {
			nae.Uint16(addrAttrPort, e.Port)
		}
		if withFlags {
			nae.Uint32(addrAttrFlags, uint32(e.Flags))
		}
		if e.IfIndex != 0 {
			nae.Int32(addrAttrIfIdx, e.IfIndex)
		}
		return nil
	})
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
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	var out []Endpoint
	for ad.Next() {
		if ad.Type() != attrAddr {
			continue
		}
		if len(out) == maxEndpoints {
			return nil, fmt.Errorf("more than %d endpoints", maxEndpoints)
		}
		var e Endpoint
		ad.Nested(func(nad *netlink.AttributeDecoder) error {
			for nad.Next() {
				switch nad.Type() {
				case addrAttrID:
					e.ID = nad.Uint8()
				case addrAttrAddr4:
					b := nad.Bytes()
					if len(b) != 4 {
						return fmt.Errorf("IPv4 address of %d bytes", len(b))
					}
					e.Addr = netip.AddrFrom4([4]byte(b))
				case addrAttrAddr6:
					b := nad.Bytes()
					if len(b) != 16 {
						return fmt.Errorf("IPv6 address of %d bytes", len(b))
					}
					e.Addr = netip.AddrFrom16([16]byte(b))
				case addrAttrPort:
					e.Port = nad.Uint16()
				case addrAttrFlags:
					e.Flags = Flags(nad.Uint32())
				case addrAttrIfIdx:
					e.IfIndex = nad.Int32()
				}
			}
			return nil
		})
		out = append(out, e)
	}
	if err := ad.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// decodeLimits parses a GET_LIMITS reply.
func decodeLimits(b []byte) (Limits, error) {
	if len(b) > maxReplyBytes {
		return Limits{}, errReplyTooLarge
	}
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return Limits{}, err
	}
	var l Limits
	for ad.Next() {
		switch ad.Type() {
		case attrRcvAddAddrs:
			l.AddAddrAccepted = ad.Uint32()
		case attrSubflows:
			l.Subflows = ad.Uint32()
		}
	}
	return l, ad.Err()
}

// OpError is the error of one path-manager operation.
type OpError struct {
	Op  string
	Err error
}

func (e *OpError) Error() string { return fmt.Sprintf("mptcp_pm %s: %v", e.Op, e.Err) }

// Unwrap returns the underlying error (often a *netlink.OpError carrying
// the kernel's errno and extended ack message).
func (e *OpError) Unwrap() error { return e.Err }

func opError(op string, err error) error {
	if err == nil {
		return nil
	}
	return &OpError{Op: op, Err: err}
}

var errEmptyReply = errors.New("empty reply")
