package telemetry

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcw-xapp/kernel-agent/payload"
)

// fixture builds an inet_diag_msg as the kernel sends it.
func fixture(src, dst string, sport, dport uint16, cookie uint64, rttUs, cwnd uint32, acked uint64, ulp string) []byte {
	b := make([]byte, sizeofDiagMsg)
	b[0], b[1] = afInet, tcpEstablished
	id := b[4:52]
	binary.BigEndian.PutUint16(id[0:2], sport)
	binary.BigEndian.PutUint16(id[2:4], dport)
	s4, d4 := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(id[4:8], s4[:])
	copy(id[20:24], d4[:])
	binary.NativeEndian.PutUint32(id[40:44], uint32(cookie))
	binary.NativeEndian.PutUint32(id[44:48], uint32(cookie>>32))
	info := make([]byte, 232) // a 6.x-sized tcp_info
	binary.NativeEndian.PutUint32(info[offRTT:], rttUs)
	binary.NativeEndian.PutUint32(info[offSndCwnd:], cwnd)
	binary.NativeEndian.PutUint64(info[offBytesAcked:], acked)
	b = appendAttr(b, attrInfo, info)
	if ulp != "" {
		b = appendAttr(b, attrULPInfo|0x8000, appendAttr(nil, ulpInfoName, append([]byte(ulp), 0)))
	}
	return b
}

func appendAttr(b []byte, typ uint16, data []byte) []byte {
	h := make([]byte, 4)
	binary.NativeEndian.PutUint16(h[0:2], uint16(4+len(data)))
	binary.NativeEndian.PutUint16(h[2:4], typ)
	b = append(b, h...)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func TestParseMessage(t *testing.T) {
	got, err := parseMessage(fixture("10.31.1.1", "10.31.1.2", 40000, 5201, 1<<40|7, 20100, 100, 12345, "mptcp"))
	if err != nil {
		t.Fatal(err)
	}
	want := Subflow{
		Src: netip.MustParseAddr("10.31.1.1"), Dst: netip.MustParseAddr("10.31.1.2"),
		SrcPort: 40000, DstPort: 5201, Cookie: 1<<40 | 7, MPTCP: true,
		RTTMicros: 20100, Cwnd: 100, BytesAcked: 12345,
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Fatalf("parseMessage (-want +got):\n%s", diff)
	}
	for name, b := range map[string][]byte{
		"short":          make([]byte, 10),
		"short tcp_info": appendAttr(make([]byte, sizeofDiagMsg), attrInfo, make([]byte, 20)),
		"bad attr len":   append(make([]byte, sizeofDiagMsg), 0xff, 0x00, 0x02, 0x00),
	} {
		if _, err := parseMessage(b); err == nil {
			t.Errorf("%s: parseMessage succeeded", name)
		}
	}
}

func TestAggregator(t *testing.T) {
	nr, wifi := netip.MustParseAddr("10.31.1.1"), netip.MustParseAddr("10.31.2.1")
	wats := map[string]WATInfo{"nr": {Addr: nr, Up: true}, "wifi": {Addr: wifi, Up: false}, "lifi": {}}
	sf := func(src netip.Addr, cookie uint64, acked uint64, rtt uint32, mptcp bool) Subflow {
		return Subflow{Src: src, Cookie: cookie, BytesAcked: acked, RTTMicros: rtt, Cwnd: 10, MPTCP: mptcp}
	}
	a := Aggregator{MPTCPOnly: true}
	t0 := time.Unix(100, 0)
	first := a.Sample(t0, []Subflow{sf(nr, 1, 1_000_000, 20000, true), sf(wifi, 2, 5, 4000, true)}, wats)
	if first["nr"].DeliveredMbps != 0 || first["nr"].Subflows != 1 || first["nr"].RTTMs != 20 {
		t.Fatalf("first sample = %+v", first["nr"])
	}
	got := a.Sample(t0.Add(500*time.Millisecond), []Subflow{
		sf(nr, 1, 1_000_000+1_250_000, 20000, true), // +1.25 MB in 0.5 s = 20 Mbps
		sf(nr, 3, 250_000, 30000, true),             // born during the interval: +4 Mbps
		sf(nr, 4, 9_999_999, 1000, false),           // plain TCP: ignored
		sf(wifi, 2, 5, 4000, true),
		sf(netip.MustParseAddr("192.0.2.1"), 5, 1, 1, true), // not a WAT
	}, wats)
	want := map[string]payload.WATTelemetry{
		"nr":   {DeliveredMbps: 24, RTTMs: 25, Cwnd: 20, BytesAcked: 2_500_000, Subflows: 2, Up: true},
		"wifi": {DeliveredMbps: 0, RTTMs: 4, Cwnd: 10, BytesAcked: 5, Subflows: 1},
		"lifi": {},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Sample (-want +got):\n%s", diff)
	}
}
