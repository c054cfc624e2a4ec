package mptcppm

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink/nl"
)

// eventBytes encodes an event as the kernel does (ports big-endian).
func eventBytes(t testing.TB, ev Event) []byte {
	t.Helper()
	attrs := []*nl.RtAttr{nl.NewRtAttr(evAttrToken, nl.Uint32Attr(ev.Token)),
		nl.NewRtAttr(evAttrLocID, nl.Uint8Attr(ev.LocalID)), nl.NewRtAttr(evAttrRemID, nl.Uint8Attr(ev.RemoteID))}
	if ev.Local.Addr().Is4() {
		l, r := ev.Local.Addr().As4(), ev.Remote.Addr().As4()
		attrs = append(attrs, nl.NewRtAttr(evAttrFamily, nl.Uint16Attr(afInet)), nl.NewRtAttr(evAttrSaddr4, l[:]), nl.NewRtAttr(evAttrDaddr4, r[:]))
	} else {
		l, r := ev.Local.Addr().As16(), ev.Remote.Addr().As16()
		attrs = append(attrs, nl.NewRtAttr(evAttrFamily, nl.Uint16Attr(afInet6)), nl.NewRtAttr(evAttrSaddr6, l[:]), nl.NewRtAttr(evAttrDaddr6, r[:]))
	}
	attrs = append(attrs, nl.NewRtAttr(evAttrSport, binary.BigEndian.AppendUint16(nil, ev.Local.Port())),
		nl.NewRtAttr(evAttrDport, binary.BigEndian.AppendUint16(nil, ev.Remote.Port())))
	if ev.Backup {
		attrs = append(attrs, nl.NewRtAttr(evAttrBackup, nl.Uint8Attr(1)))
	}
	if ev.ServerSide {
		attrs = append(attrs, nl.NewRtAttr(evAttrServerSide, nl.Uint8Attr(1)))
	}
	return serialize(attrs...)
}

var cmpAddrPort = cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })

func TestDecodeEvent(t *testing.T) {
	tests := []struct {
		name string
		ev   Event
	}{
		{"sub_established v4", Event{Type: EventSubEstablished, Token: 0x21b12179, LocalID: 0, RemoteID: 1,
			Local: netip.MustParseAddrPort("10.40.0.2:5201"), Remote: netip.MustParseAddrPort("10.41.2.1:41015")}},
		{"established server side", Event{Type: EventEstablished, Token: 7, ServerSide: true,
			Local: netip.MustParseAddrPort("10.40.0.2:5201"), Remote: netip.MustParseAddrPort("10.41.1.1:39702")}},
		{"sub_priority v6 backup", Event{Type: EventSubPriority, Token: 1, RemoteID: 3, Backup: true,
			Local: netip.MustParseAddrPort("[fd00::2]:443"), Remote: netip.MustParseAddrPort("[fd00:1::1]:50000")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeEvent(uint8(tt.ev.Type), eventBytes(t, tt.ev))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.ev, got, cmpAddrPort); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
	// closed carries only the token: no addresses.
	b := serialize(nl.NewRtAttr(evAttrToken, nl.Uint32Attr(9)))
	if ev, err := decodeEvent(uint8(EventClosed), b); err != nil || ev.Token != 9 || ev.Local.IsValid() || ev.Remote.IsValid() {
		t.Fatalf("closed: %+v, %v", ev, err)
	}
	for name, bad := range map[string][]byte{
		"3-byte address": {7, 0, evAttrSaddr4, 0, 10, 40, 0, 0},
		"1-byte port":    {5, 0, evAttrSport, 0, 1, 0, 0, 0},
		"truncated":      {8, 0, evAttrToken, 0, 1},
		"too large":      make([]byte, maxEventBytes+4),
	} {
		if _, err := decodeEvent(uint8(EventCreated), bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestEncodeSubflowFlags(t *testing.T) {
	local, remote := netip.MustParseAddrPort("10.40.0.2:5201"), netip.MustParseAddrPort("10.41.2.1:41015")
	for _, backup := range []bool{true, false} {
		b, err := encodeSubflowFlags(0xabcd, local, remote, backup)
		if err != nil {
			t.Fatal(err)
		}
		attrs, err := parseAttrs(b)
		if err != nil {
			t.Fatal(err)
		}
		var token uint32
		var loc, rem []Endpoint
		for _, a := range attrs {
			switch a.typ {
			case attrToken:
				token, err = a.u32()
			case attrAddr:
				// decodeEndpoints reads a list of attrAddr attributes.
				loc, err = decodeEndpoints(serialize(nl.NewRtAttr(attrAddr, a.data)))
			case attrAddrRemote:
				rem, err = decodeEndpoints(serialize(nl.NewRtAttr(attrAddr, a.data)))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		wantFlags := Flags(0)
		if backup {
			wantFlags = FlagBackup
		}
		if token != 0xabcd || len(loc) != 1 || len(rem) != 1 ||
			loc[0].Addr != local.Addr() || loc[0].Port != local.Port() || loc[0].Flags != wantFlags ||
			rem[0].Addr != remote.Addr() || rem[0].Port != remote.Port() || rem[0].Flags != 0 {
			t.Fatalf("backup=%t: token %x local %+v remote %+v", backup, token, loc, rem)
		}
	}
	for name, c := range map[string][2]netip.AddrPort{
		"no remote":      {local, {}},
		"mixed families": {local, netip.MustParseAddrPort("[fd00::1]:1")},
	} {
		if _, err := encodeSubflowFlags(1, c[0], c[1], true); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}

// diagBytes builds an inet_diag_msg for a subflow the way the kernel does:
// the socket id in network order, then INET_DIAG_ULP_INFO with the ULP
// name and the nested MPTCP subflow attributes in host order.
func diagBytes(t testing.TB, s Subflow, ulp string) []byte {
	t.Helper()
	b := make([]byte, sizeofDiagMsg)
	if s.Local.Addr().Is4() {
		b[0] = afInet
		l, r := s.Local.Addr().As4(), s.Remote.Addr().As4()
		copy(b[8:12], l[:])
		copy(b[24:28], r[:])
	} else {
		b[0] = afInet6
		l, r := s.Local.Addr().As16(), s.Remote.Addr().As16()
		copy(b[8:24], l[:])
		copy(b[24:40], r[:])
	}
	binary.BigEndian.PutUint16(b[4:6], s.Local.Port())
	binary.BigEndian.PutUint16(b[6:8], s.Remote.Port())
	mpb := serialize(nl.NewRtAttr(1, nl.Uint32Attr(0xdead)), // TOKEN_REM: ignored
		nl.NewRtAttr(sfAttrTokenLoc, nl.Uint32Attr(s.Token)), nl.NewRtAttr(sfAttrFlags, nl.Uint32Attr(uint32(s.Flags))),
		nl.NewRtAttr(sfAttrIDRem, nl.Uint8Attr(s.RemoteID)), nl.NewRtAttr(sfAttrIDLoc, nl.Uint8Attr(s.LocalID)))
	ulpb := serialize(nl.NewRtAttr(ulpInfoName, nl.ZeroTerminated(ulp)), nl.NewRtAttr(ulpInfoMPTCP, mpb))
	tb := serialize(nl.NewRtAttr(diagAttrInfo, make([]byte, 232)), nl.NewRtAttr(diagAttrULPInfo, ulpb))
	return append(b, tb...)
}

func TestParseDiag(t *testing.T) {
	v4 := Subflow{Local: netip.MustParseAddrPort("10.40.0.2:5201"), Remote: netip.MustParseAddrPort("10.41.2.1:41015"),
		Token: 0xe9fcc5a8, Flags: SubflowJoinRemote | SubflowBackupLocal | SubflowFullyEstab | SubflowConnected, RemoteID: 1}
	v6 := Subflow{Local: netip.MustParseAddrPort("[fd00::2]:443"), Remote: netip.MustParseAddrPort("[fd00::1]:5000"),
		Token: 1, Flags: SubflowMPCapableRemote | SubflowBackupRemote, LocalID: 2}
	for _, want := range []Subflow{v4, v6} {
		got, ok, err := parseDiag(diagBytes(t, want, "mptcp"))
		if err != nil || !ok {
			t.Fatalf("parseDiag(%v) = %v, %v", want, ok, err)
		}
		if diff := cmp.Diff(want, got, cmpAddrPort); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
	}
	if _, ok, err := parseDiag(diagBytes(t, v4, "tls")); err != nil || ok {
		t.Fatalf("a TLS socket: ok %t, %v", ok, err)
	}
	if !v4.Flags.Backup() || !v6.Flags.Backup() || (SubflowConnected).Backup() {
		t.Fatal("Backup() wrong")
	}
	if got := v4.Flags.String(); got != "join-rem backup-loc fully-established connected" {
		t.Fatalf("String = %q", got)
	}
	good := diagBytes(t, v4, "mptcp")
	for name, bad := range map[string][]byte{
		"short":            good[:40],
		"bad family":       append([]byte{99}, good[1:]...),
		"attribute length": append(append([]byte(nil), good[:sizeofDiagMsg]...), 200, 0, 1, 0, 0, 0, 0, 0),
		"too large":        append(append([]byte(nil), good...), make([]byte, maxDiagMsgBytes)...),
	} {
		if _, _, err := parseDiag(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Too many attributes: 65 empty ones.
	many := append([]byte(nil), good[:sizeofDiagMsg]...)
	for range maxDiagAttributes + 1 {
		many = append(many, 4, 0, 9, 0)
	}
	if _, _, err := parseDiag(many); err == nil {
		t.Error("65 attributes accepted")
	}
}

// FuzzDecodeEvent checks that the event decoder never panics and keeps
// its bounds.
func FuzzDecodeEvent(f *testing.F) {
	f.Add(uint8(EventSubEstablished), eventBytes(f, Event{Token: 1, Local: netip.MustParseAddrPort("10.0.0.1:1"), Remote: netip.MustParseAddrPort("10.0.0.2:2")}))
	f.Add(uint8(EventCreated), eventBytes(f, Event{Local: netip.MustParseAddrPort("[::1]:1"), Remote: netip.MustParseAddrPort("[::2]:2"), Backup: true}))
	f.Add(uint8(3), []byte{8, 0, 1, 0, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, cmd uint8, b []byte) {
		ev, err := decodeEvent(cmd, b)
		if err != nil {
			return
		}
		if len(b) > maxEventBytes {
			t.Fatalf("accepted %d bytes", len(b))
		}
		for _, a := range []netip.AddrPort{ev.Local, ev.Remote} {
			if a.Addr().IsValid() && !a.Addr().Is4() && !a.Addr().Is6() {
				t.Fatalf("odd address %v", a)
			}
		}
	})
}

// FuzzParseDiag checks that the sock_diag decoder never panics and keeps
// its bounds.
func FuzzParseDiag(f *testing.F) {
	f.Add(diagBytes(f, Subflow{Local: netip.MustParseAddrPort("10.0.0.1:1"), Remote: netip.MustParseAddrPort("10.0.0.2:2"), Token: 5, Flags: SubflowBackupLocal}, "mptcp"))
	f.Add(diagBytes(f, Subflow{Local: netip.MustParseAddrPort("[fd00::1]:1"), Remote: netip.MustParseAddrPort("[fd00::2]:2")}, "tls"))
	f.Add(make([]byte, sizeofDiagMsg))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, err := parseDiag(b)
		if err == nil && (len(b) < sizeofDiagMsg || len(b) > maxDiagMsgBytes) {
			t.Fatalf("accepted %d bytes", len(b))
		}
	})
}
