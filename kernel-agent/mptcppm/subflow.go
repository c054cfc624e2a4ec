package mptcppm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink/nl"
)

// Per-connection control, for a host that is the passive end of many MPTCP
// connections (a proxy). Its own endpoints cannot tell one peer's subflows
// from another's, so it acts on subflows by token and address pair, which
// the kernel accepts only under the userspace path manager
// (net.mptcp.path_manager = userspace). Under that path manager the
// kernel also refuses MP_JOINs while nobody listens on the events group,
// so a Monitor must stay open for joins to be accepted at all.

// Attributes of per-connection commands (MPTCP_PM_ATTR_*).
const (
	attrToken      = 4
	attrAddrRemote = 6
)

// EventsGroup is the generic netlink multicast group of path-manager events.
const EventsGroup = "mptcp_pm_events"

// EventType is a path-manager event (enum mptcp_event_type).
type EventType uint8

// Events the proxy acts on; others decode with their number.
const (
	EventCreated        EventType = 1
	EventEstablished    EventType = 2
	EventClosed         EventType = 3
	EventAnnounced      EventType = 6
	EventRemoved        EventType = 7
	EventSubEstablished EventType = 10
	EventSubClosed      EventType = 11
	EventSubPriority    EventType = 13
)

func (t EventType) String() string {
	switch t {
	case EventCreated:
		return "created"
	case EventEstablished:
		return "established"
	case EventClosed:
		return "closed"
	case EventAnnounced:
		return "announced"
	case EventRemoved:
		return "removed"
	case EventSubEstablished:
		return "sub_established"
	case EventSubClosed:
		return "sub_closed"
	case EventSubPriority:
		return "sub_priority"
	}
	return fmt.Sprintf("event(%d)", uint8(t))
}

// Event attributes (enum mptcp_event_attr).
const (
	evAttrToken      = 1
	evAttrFamily     = 2
	evAttrLocID      = 3
	evAttrRemID      = 4
	evAttrSaddr4     = 5
	evAttrSaddr6     = 6
	evAttrDaddr4     = 7
	evAttrDaddr6     = 8
	evAttrSport      = 9
	evAttrDport      = 10
	evAttrBackup     = 11
	evAttrServerSide = 19
)

// Event is one path-manager notification. Local is the host's side of the
// subflow (saddr/sport), Remote the peer's (daddr/dport); created and
// established describe the connection's first subflow.
type Event struct {
	Type       EventType
	Token      uint32
	LocalID    uint8
	RemoteID   uint8
	Local      netip.AddrPort
	Remote     netip.AddrPort
	Backup     bool
	ServerSide bool
}

// maxEventBytes bounds one event: the kernel sends under 100 bytes of
// attributes; more is not an event of this family.
const maxEventBytes = 1024

// decodeEvent parses the attributes of one event message of type cmd.
// Addresses must have their exact lengths; ports are big-endian on the
// wire (the kernel copies inet_sport).
func decodeEvent(cmd uint8, b []byte) (Event, error) {
	if len(b) > maxEventBytes {
		return Event{}, fmt.Errorf("event of %d bytes, at most %d", len(b), maxEventBytes)
	}
	attrs, err := parseAttrs(b)
	if err != nil {
		return Event{}, err
	}
	ev := Event{Type: EventType(cmd)}
	var local, remote netip.Addr
	var sport, dport uint16
	addr := func(a attr, want int) (netip.Addr, error) {
		if err := a.exact(want); err != nil {
			return netip.Addr{}, err
		}
		if want == 4 {
			return netip.AddrFrom4([4]byte(a.data)), nil
		}
		return netip.AddrFrom16([16]byte(a.data)), nil
	}
	port := func(a attr) (uint16, error) {
		if err := a.exact(2); err != nil {
			return 0, err
		}
		return binary.BigEndian.Uint16(a.data), nil
	}
	flag := func(a attr) (bool, error) {
		v, err := a.u8()
		return v != 0, err
	}
	for _, a := range attrs {
		var err error
		switch a.typ {
		case evAttrToken:
			ev.Token, err = a.u32()
		case evAttrLocID:
			ev.LocalID, err = a.u8()
		case evAttrRemID:
			ev.RemoteID, err = a.u8()
		case evAttrSaddr4:
			local, err = addr(a, 4)
		case evAttrSaddr6:
			local, err = addr(a, 16)
		case evAttrDaddr4:
			remote, err = addr(a, 4)
		case evAttrDaddr6:
			remote, err = addr(a, 16)
		case evAttrSport:
			sport, err = port(a)
		case evAttrDport:
			dport, err = port(a)
		case evAttrBackup:
			ev.Backup, err = flag(a)
		case evAttrServerSide:
			ev.ServerSide, err = flag(a)
		}
		if err != nil {
			return Event{}, err
		}
	}
	if local.IsValid() {
		ev.Local = netip.AddrPortFrom(local, sport)
	}
	if remote.IsValid() {
		ev.Remote = netip.AddrPortFrom(remote, dport)
	}
	return ev, nil
}

// encodeSubflowFlags builds the SET_FLAGS request for one subflow of the
// connection with token: the local address carries the flags, the remote
// one picks the subflow. With ports given the kernel matches the exact
// subflow (it flags the first subflow that matches).
func encodeSubflowFlags(token uint32, local, remote netip.AddrPort, backup bool) ([]byte, error) {
	if !local.Addr().IsValid() || !remote.Addr().IsValid() {
		return nil, errors.New("subflow without local or remote address")
	}
	if local.Addr().Is4() != remote.Addr().Is4() {
		return nil, fmt.Errorf("address families differ: %s, %s", local, remote)
	}
	var flags Flags
	if backup {
		flags = FlagBackup
	}
	rem := nested(attrAddrRemote)
	encodeAddr(rem, remote.Addr())
	if remote.Port() != 0 {
		rem.AddRtAttr(addrAttrPort, nl.Uint16Attr(remote.Port()))
	}
	return serialize(nl.NewRtAttr(attrToken, nl.Uint32Attr(token)),
		encodeEndpoint(Endpoint{Addr: local.Addr(), Port: local.Port(), Flags: flags}, true), rem), nil
}

// SubflowFlags are the MPTCP_SUBFLOW_FLAG_* bits sock_diag reports.
type SubflowFlags uint32

// Subflow flags. BackupRemote: the peer asked for backup (MP_PRIO or a
// backup MP_JOIN); BackupLocal: this host did.
const (
	SubflowMPCapableRemote SubflowFlags = 1 << 0
	SubflowMPCapableLocal  SubflowFlags = 1 << 1
	SubflowJoinRemote      SubflowFlags = 1 << 2
	SubflowJoinLocal       SubflowFlags = 1 << 3
	SubflowBackupRemote    SubflowFlags = 1 << 4
	SubflowBackupLocal     SubflowFlags = 1 << 5
	SubflowFullyEstab      SubflowFlags = 1 << 6
	SubflowConnected       SubflowFlags = 1 << 7
)

func (f SubflowFlags) String() string {
	var s []string
	for _, n := range []struct {
		f    SubflowFlags
		name string
	}{{SubflowMPCapableRemote, "mpc-rem"}, {SubflowMPCapableLocal, "mpc-loc"}, {SubflowJoinRemote, "join-rem"},
		{SubflowJoinLocal, "join-loc"}, {SubflowBackupRemote, "backup-rem"}, {SubflowBackupLocal, "backup-loc"},
		{SubflowFullyEstab, "fully-established"}, {SubflowConnected, "connected"}} {
		if f&n.f != 0 {
			s = append(s, n.name)
		}
	}
	return strings.Join(s, " ")
}

// Backup tells whether the default scheduler treats the subflow as backup:
// since Linux 6.11 ("mptcp: sched: check both directions for backup") it
// does when either end flagged it.
func (f SubflowFlags) Backup() bool { return f&(SubflowBackupRemote|SubflowBackupLocal) != 0 }

// Subflow is one MPTCP subflow as sock_diag reports it. Token is the local
// token of its connection, the one events and SET_FLAGS use.
type Subflow struct {
	Local    netip.AddrPort
	Remote   netip.AddrPort
	Token    uint32
	Flags    SubflowFlags
	LocalID  uint8
	RemoteID uint8
}

// inet_diag constants (linux/inet_diag.h, linux/mptcp.h).
const (
	sockDiagByFamily  = 20
	diagAttrInfo      = 2  // INET_DIAG_INFO (asked for: it gates the ULP info)
	diagAttrULPInfo   = 19 // INET_DIAG_ULP_INFO
	ulpInfoName       = 1
	ulpInfoMPTCP      = 3
	sfAttrTokenLoc    = 2
	sfAttrFlags       = 8
	sfAttrIDRem       = 9
	sfAttrIDLoc       = 10
	tcpEstablished    = 1
	ipprotoTCP        = 6
	sizeofDiagReqV2   = 56
	sizeofDiagMsg     = 72
	maxDiagMsgBytes   = 8192
	maxDiagAttributes = 64
)

// diagRequest asks for established TCP sockets of family with their aux
// (ULP) information, which the kernel adds only with INET_DIAG_INFO and to
// a CAP_NET_ADMIN caller.
func diagRequest(family uint8) []byte {
	b := make([]byte, sizeofDiagReqV2)
	b[0] = family
	b[1] = ipprotoTCP
	b[2] = 1 << (diagAttrInfo - 1)
	binary.NativeEndian.PutUint32(b[4:8], 1<<tcpEstablished)
	return b
}

// parseDiag decodes one inet_diag_msg; ok is false for a TCP socket that
// is not an MPTCP subflow. The socket id is network order, the MPTCP
// attributes host order. Size, attribute count and lengths are checked
// before reading.
func parseDiag(b []byte) (s Subflow, ok bool, err error) {
	if len(b) < sizeofDiagMsg {
		return Subflow{}, false, fmt.Errorf("inet_diag message of %d bytes, want >= %d", len(b), sizeofDiagMsg)
	}
	if len(b) > maxDiagMsgBytes {
		return Subflow{}, false, fmt.Errorf("inet_diag message of %d bytes, at most %d", len(b), maxDiagMsgBytes)
	}
	family := b[0]
	id := b[4:52]
	sport := binary.BigEndian.Uint16(id[0:2])
	dport := binary.BigEndian.Uint16(id[2:4])
	switch family {
	case afInet:
		s.Local = netip.AddrPortFrom(netip.AddrFrom4([4]byte(id[4:8])), sport)
		s.Remote = netip.AddrPortFrom(netip.AddrFrom4([4]byte(id[20:24])), dport)
	case afInet6:
		s.Local = netip.AddrPortFrom(netip.AddrFrom16([16]byte(id[4:20])).Unmap(), sport)
		s.Remote = netip.AddrPortFrom(netip.AddrFrom16([16]byte(id[20:36])).Unmap(), dport)
	default:
		return Subflow{}, false, fmt.Errorf("inet_diag family %d", family)
	}
	n := 0
	err = walkAttrs(b[sizeofDiagMsg:], &n, func(typ uint16, data []byte) error {
		if typ != diagAttrULPInfo {
			return nil
		}
		return walkAttrs(data, &n, func(typ uint16, data []byte) error {
			switch typ {
			case ulpInfoName:
				name, _, _ := strings.Cut(string(data), "\x00")
				ok = name == "mptcp"
			case ulpInfoMPTCP:
				return walkAttrs(data, &n, func(typ uint16, data []byte) error {
					var want int
					switch typ {
					case sfAttrTokenLoc, sfAttrFlags:
						want = 4
					case sfAttrIDRem, sfAttrIDLoc:
						want = 1
					default:
						return nil
					}
					if len(data) < want {
						return fmt.Errorf("subflow attribute %d of %d bytes", typ, len(data))
					}
					switch typ {
					case sfAttrTokenLoc:
						s.Token = binary.NativeEndian.Uint32(data)
					case sfAttrFlags:
						s.Flags = SubflowFlags(binary.NativeEndian.Uint32(data))
					case sfAttrIDRem:
						s.RemoteID = data[0]
					case sfAttrIDLoc:
						s.LocalID = data[0]
					}
					return nil
				})
			}
			return nil
		})
	})
	if err != nil {
		return Subflow{}, false, err
	}
	return s, ok, nil
}

// walkAttrs calls fn for each netlink attribute of b, counting them in *n
// (shared across nesting levels, so the bound holds for the whole message).
func walkAttrs(b []byte, n *int, fn func(typ uint16, data []byte) error) error {
	for len(b) >= 4 {
		if *n++; *n > maxDiagAttributes {
			return fmt.Errorf("more than %d attributes", maxDiagAttributes)
		}
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		if l < 4 || l > len(b) {
			return fmt.Errorf("attribute length %d of %d bytes left", l, len(b))
		}
		// NLA_F_NESTED and NLA_F_NET_BYTEORDER are not part of the type.
		if err := fn(binary.NativeEndian.Uint16(b[2:4])&^0xc000, b[4:l]); err != nil {
			return err
		}
		a := (l + 3) &^ 3
		if a >= len(b) {
			return nil
		}
		b = b[a:]
	}
	return nil
}
