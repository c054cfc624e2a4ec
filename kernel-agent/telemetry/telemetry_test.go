package telemetry

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcw-xapp/kernel-agent/payload"
)

// tcpInfo is the part of struct tcp_info a fixture sets.
type tcpInfo struct {
	rttUs, cwnd, mss, notsent uint32
	acked, rate               uint64
	appLimited                bool
	busy, rwnd, sndbuf        uint64
	dataSegsOut, retrans      uint32
	minRTTUs, rtoMs, lastAck  uint32
	rtos                      uint16
	caState, backoff          uint8
}

// tcpInfoBytes lays out a tcp_info of size bytes as the kernel does.
func tcpInfoBytes(size int, ti tcpInfo) []byte {
	info := make([]byte, size)
	put32 := func(off int, v uint32) {
		if off+4 <= size {
			binary.NativeEndian.PutUint32(info[off:], v)
		}
	}
	put64 := func(off int, v uint64) {
		if off+8 <= size {
			binary.NativeEndian.PutUint64(info[off:], v)
		}
	}
	put32(offSndMSS, ti.mss)
	put32(offRTT, ti.rttUs)
	put32(offSndCwnd, ti.cwnd)
	put64(offBytesAcked, ti.acked)
	put32(offNotsentBytes, ti.notsent)
	put32(offDataSegsOut, ti.dataSegsOut)
	put32(offTotalRetrans, ti.retrans)
	put64(offDeliveryRate, ti.rate)
	put64(offBusyTime, ti.busy)
	put64(offRwndLimited, ti.rwnd)
	put64(offSndbufLimited, ti.sndbuf)
	put32(offMinRTT, ti.minRTTUs)
	put32(offTotalRTOTime, ti.rtoMs)
	put32(offLastAckRecv, ti.lastAck)
	if offTotalRTO+2 <= size {
		binary.NativeEndian.PutUint16(info[offTotalRTO:], ti.rtos)
	}
	info[offCAState], info[offBackoff] = ti.caState, ti.backoff
	// tcpi_fastopen_client_fail (the next bit-field) set, so that reading
	// the wrong bit shows.
	info[offFlags7] = 0b110 // little-endian layout; big-endian mirrors it
	if appLimitedBit() == 0x80 {
		info[offFlags7] = 0b0110_0000
	}
	if ti.appLimited {
		info[offFlags7] |= appLimitedBit()
	}
	return info
}

// fixture builds an inet_diag_msg as the kernel sends it, with a 6.18-sized
// tcp_info (248 bytes).
func fixture(src, dst string, sport, dport uint16, cookie uint64, ti tcpInfo, ulp string) []byte {
	return fixtureSized(src, dst, sport, dport, cookie, 248, ti, ulp)
}

func fixtureSized(src, dst string, sport, dport uint16, cookie uint64, size int, ti tcpInfo, ulp string) []byte {
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
	b = appendAttr(b, attrInfo, tcpInfoBytes(size, ti))
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

var addrCmp = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

func TestParseMessage(t *testing.T) {
	ti := tcpInfo{
		rttUs: 20100, cwnd: 100, mss: 1448, notsent: 65536, acked: 12345, rate: 4_200_000,
		appLimited: true, busy: 900_000, rwnd: 100_000, sndbuf: 50_000,
		dataSegsOut: 4_000_000_001, retrans: 70_001,
		minRTTUs: 15_000, rtoMs: 1234, rtos: 5, lastAck: 321, caState: caLoss, backoff: 3,
	}
	base := Subflow{
		Src: netip.MustParseAddr("10.31.1.1"), Dst: netip.MustParseAddr("10.31.1.2"),
		SrcPort: 40000, DstPort: 5201, Cookie: 1<<40 | 7, MPTCP: true,
		RTTMicros: 20100, Cwnd: 100, BytesAcked: 12345, DeliveryRate: 4_200_000,
		DeliveryRateAppLimited: true, SndMSS: 1448, NotsentBytes: 65536,
		DataSegsOut: 4_000_000_001, TotalRetrans: 70_001,
		MinRTTMicros: 15_000, LastAckRecvMillis: 321, CAState: caLoss, Backoff: 3,
	}
	withChrono := base
	withChrono.HasChrono = true
	withChrono.BusyMicros, withChrono.RwndLimitedMicros, withChrono.SndbufLimitedMicros = 900_000, 100_000, 50_000
	withRTOTime := withChrono
	withRTOTime.HasRTOTime, withRTOTime.RTOs, withRTOTime.RTORecoveryMillis = true, 5, 1234
	notLimited := withRTOTime
	notLimited.DeliveryRateAppLimited = false
	tiNotLimited := ti
	tiNotLimited.appLimited = false
	for _, tc := range []struct {
		name string
		size int
		ti   tcpInfo
		want Subflow
	}{
		{"linux 6.18 (248 bytes)", 248, ti, withRTOTime},
		{"RTO time in the kernel's tcp_info (6.7)", rtoTCPInfoLen, ti, withRTOTime},
		{"one byte short of the RTO time", rtoTCPInfoLen - 1, ti, withChrono},
		{"linux 5.4 to 6.1 (232 bytes)", 232, ti, withChrono},
		{"linux 4.19 (224 bytes)", 224, ti, withChrono},
		{"rate sample not app-limited", 248, tiNotLimited, notLimited},
		{"chrono times in the kernel's tcp_info", chronoTCPInfoLen, ti, withChrono},
		{"before chrono times (4.9, 168 bytes)", minTCPInfoLen, ti, base},
		{"one byte short of the chrono times", chronoTCPInfoLen - 1, ti, base},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMessage(fixtureSized("10.31.1.1", "10.31.1.2", 40000, 5201, 1<<40|7, tc.size, tc.ti, "mptcp"))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, addrCmp); diff != "" {
				t.Fatalf("parseMessage (-want +got):\n%s", diff)
			}
		})
	}
	for name, b := range map[string][]byte{
		"short":            make([]byte, 10),
		"short tcp_info":   appendAttr(make([]byte, sizeofDiagMsg), attrInfo, make([]byte, 20)),
		"no delivery rate": appendAttr(make([]byte, sizeofDiagMsg), attrInfo, make([]byte, minTCPInfoLen-1)),
		"bad attr len":     append(make([]byte, sizeofDiagMsg), 0xff, 0x00, 0x02, 0x00),
	} {
		if _, err := parseMessage(b); err == nil {
			t.Errorf("%s: parseMessage succeeded", name)
		}
	}
}

func TestPathLimitedMicros(t *testing.T) {
	for _, tc := range []struct {
		busy, rwnd, sndbuf, want uint64
	}{
		{1000, 0, 0, 1000},
		{1000, 300, 200, 500},
		{1000, 600, 400, 0},
		{1000, 900, 400, 0}, // inconsistent counters never wrap around
		{0, 0, 0, 0},
	} {
		s := Subflow{BusyMicros: tc.busy, RwndLimitedMicros: tc.rwnd, SndbufLimitedMicros: tc.sndbuf}
		if got := s.PathLimitedMicros(); got != tc.want {
			t.Errorf("busy %d rwnd %d sndbuf %d: PathLimitedMicros = %d, want %d", tc.busy, tc.rwnd, tc.sndbuf, got, tc.want)
		}
	}
}

func TestNetworkQueued(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rtt, least uint32
		want       bool
	}{
		{"bench: 50 ms buffer, no propagation delay", 30_000, 300, true},
		{"a 20 ms path with 25 ms of queue", 45_000, 20_000, true},
		{"exactly twice the least RTT and 5 ms above it", 10_000, 5_000, true},
		{"under twice the least RTT (jitter of a long path)", 39_000, 20_000, false},
		{"twice but under 5 ms above (a short hop's jitter)", 4_000, 1_000, false},
		{"least RTT unknown", 30_000, 0, false},
	} {
		s := Subflow{RTTMicros: tc.rtt, MinRTTMicros: tc.least}
		if got := s.NetworkQueued(); got != tc.want {
			t.Errorf("%s: srtt %d least %d: NetworkQueued = %v, want %v", tc.name, tc.rtt, tc.least, got, tc.want)
		}
	}
}

func TestInRTORecovery(t *testing.T) {
	for _, tc := range []struct {
		name             string
		caState, backoff uint8
		want             bool
	}{
		{"open", 0, 0, false},
		{"fast recovery (a path-limited sender's loss)", 3, 0, false},
		{"loss state after a timeout", caLoss, 0, true},
		{"timer backed off", 0, 2, true},
	} {
		s := Subflow{CAState: tc.caState, Backoff: tc.backoff}
		if got := s.InRTORecovery(); got != tc.want {
			t.Errorf("%s: InRTORecovery = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func f64(v float64) *float64 { return &v }

func TestAggregator(t *testing.T) {
	nr, wifi := netip.MustParseAddr("10.31.1.1"), netip.MustParseAddr("10.31.2.1")
	wats := map[string]WATInfo{"nr": {Addr: nr, Up: true}, "wifi": {Addr: wifi, Up: false}, "lifi": {}}
	sf := func(src netip.Addr, cookie uint64, acked, received uint64, rtt uint32, mptcp bool) Subflow {
		return Subflow{Src: src, Cookie: cookie, BytesAcked: acked, BytesRecv: received, RTTMicros: rtt, Cwnd: 10, MPTCP: mptcp}
	}
	a := Aggregator{MPTCPOnly: true}
	t0 := time.Unix(100, 0)
	first := a.Sample(t0, []Subflow{sf(nr, 1, 1_000_000, 7, 20000, true), sf(wifi, 2, 5, 0, 4000, true)}, wats)
	if n := first["nr"]; n.UL.DeliveredMbps != 0 || n.DL.DeliveredMbps != 0 || n.Subflows != 1 || n.RTTMs != 20 || n.UL.Saturated != nil || first["lifi"].UL.Saturated != nil {
		t.Fatalf("first sample = %+v", first["nr"])
	}
	got := a.Sample(t0.Add(500*time.Millisecond), []Subflow{
		sf(nr, 1, 1_000_000+1_250_000, 7+2_500_000, 20000, true), // +1.25 MB sent (20 Mbps), +2.5 MB received (40 Mbps) in 0.5 s
		sf(nr, 3, 250_000, 125_000, 30000, true),                 // born during the interval: +4 Mbps, +2 Mbps
		sf(nr, 4, 9_999_999, 9_999_999, 1000, false),             // plain TCP: ignored
		sf(wifi, 2, 5, 0, 4000, true),
		sf(netip.MustParseAddr("192.0.2.1"), 5, 1, 1, 1, true), // not a WAT
	}, wats)
	n := func(v int64) *int64 { return &v }
	want := map[string]payload.WATTelemetry{
		// No chrono times: saturation unknown. Delivery-rate samples of
		// subflows that delivered: 0.
		"nr": {RTTMs: 25, Subflows: 2, Up: true,
			UL: &payload.DirTelemetry{DeliveredMbps: 24, Cwnd: n(20), BytesAcked: n(2_500_000), DeliveryRateMbps: f64(0)},
			DL: &payload.DirTelemetry{DeliveredMbps: 42, BytesReceived: n(2_625_007)}},
		"wifi": {RTTMs: 4, Subflows: 1,
			UL: &payload.DirTelemetry{Cwnd: n(10), BytesAcked: n(5)},
			DL: &payload.DirTelemetry{BytesReceived: n(0)}},
		// No subflow: nothing waited for it.
		"lifi": {UL: &payload.DirTelemetry{Cwnd: n(0), BytesAcked: n(0), Saturated: f64(0)}, DL: &payload.DirTelemetry{BytesReceived: n(0)}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Sample (-want +got):\n%s", diff)
	}
}

// TestAggregatorRemote is the proxy's view: subflows matched by their
// remote address (the CPE's WAT address), the figures of the sender
// reported as dl, nothing as ul.
func TestAggregatorRemote(t *testing.T) {
	cpeNR, cpeWiFi := netip.MustParseAddr("10.31.1.2"), netip.MustParseAddr("10.31.2.2")
	proxy := netip.MustParseAddr("10.31.0.1")
	wats := map[string]WATInfo{"nr": {Addr: cpeNR, Up: true}, "wifi": {Addr: cpeWiFi, Up: true}}
	sf := func(dst netip.Addr, cookie, acked uint64) Subflow {
		return Subflow{Src: proxy, Dst: dst, Cookie: cookie, BytesAcked: acked, BytesRecv: 99, RTTMicros: 10_000, Cwnd: 10, MPTCP: true}
	}
	a := Aggregator{MPTCPOnly: true, Remote: true}
	t0 := time.Unix(100, 0)
	a.Sample(t0, []Subflow{sf(cpeNR, 1, 0), sf(cpeWiFi, 2, 0)}, wats)
	got := a.Sample(t0.Add(time.Second), []Subflow{
		sf(cpeNR, 1, 5_000_000), // 40 Mbps
		sf(cpeWiFi, 2, 1_000_000),
		sf(netip.MustParseAddr("10.31.9.9"), 3, 1_000_000), // another CPE
	}, wats)
	for w, mbps := range map[string]float64{"nr": 40, "wifi": 8} {
		g := got[w]
		if g.UL != nil || g.DL == nil || g.DL.DeliveredMbps != mbps || g.DL.BytesReceived != nil || g.Subflows != 1 {
			t.Errorf("%s: %+v (dl %+v), want dl %v Mbit/s only", w, g, g.DL, mbps)
		}
	}
}

// segments sets a subflow's cumulative data segments sent and
// retransmissions.
func segments(s Subflow, dataSegsOut, retrans uint32) Subflow {
	s.DataSegsOut, s.TotalRetrans = dataSegsOut, retrans
	return s
}

// TestAggregatorRetrans runs two samples one second apart per case and
// checks the WAT's retrans_pct after the second.
func TestAggregatorRetrans(t *testing.T) {
	nr := netip.MustParseAddr("10.31.1.1")
	wats := map[string]WATInfo{"nr": {Addr: nr, Up: true}}
	sf := func(cookie uint64, dataSegsOut, retrans uint32) Subflow {
		return segments(Subflow{Src: nr, Cookie: cookie, MPTCP: true}, dataSegsOut, retrans)
	}
	for _, tc := range []struct {
		name          string
		before, after []Subflow
		pct           *float64
	}{{
		name:   "share of the interval's data segments, not of the socket's life",
		before: []Subflow{sf(1, 100_000, 5_000)},
		after:  []Subflow{sf(1, 102_000, 5_030)},
		pct:    f64(1.5),
	}, {
		name:   "no loss",
		before: []Subflow{sf(1, 100_000, 5_000)},
		after:  []Subflow{sf(1, 101_000, 5_000)},
		pct:    f64(0),
	}, {
		name:   "nothing sent: absent, not 0",
		before: []Subflow{sf(1, 100_000, 5_000)},
		after:  []Subflow{sf(1, 100_000, 5_000)},
	}, {
		name:   "no subflow: absent",
		before: nil,
		after:  nil,
	}, {
		name:   "a dead path: an RTO backing off resends and sends nothing else",
		before: []Subflow{sf(1, 100_000, 5_000)},
		after:  []Subflow{sf(1, 100_003, 5_003)},
		pct:    f64(100),
	}, {
		// 30 of 1000 and 10 of 3000: 40 of 4000, not the mean of 3% and
		// 0.33%.
		name:   "weighted by the segments each subflow sent",
		before: []Subflow{sf(1, 0, 0), sf(2, 0, 0)},
		after:  []Subflow{sf(1, 1_000, 30), sf(2, 3_000, 10)},
		pct:    f64(1),
	}, {
		name:   "subflow born during the interval counts from zero",
		before: []Subflow{sf(1, 1_000, 0)},
		after:  []Subflow{sf(1, 2_000, 0), sf(2, 1_000, 20)},
		pct:    f64(1),
	}, {
		name:   "subflow closed during the interval drops out",
		before: []Subflow{sf(1, 1_000, 0), sf(2, 1_000, 0)},
		after:  []Subflow{sf(1, 2_000, 50)},
		pct:    f64(5),
	}, {
		// 2^32 - 100 + 1000 segments wrap to 900; 2^32 - 1 + 20
		// retransmissions to 19.
		name:   "32-bit counters wrap: their growth still counts",
		before: []Subflow{sf(1, 1<<32-100, 1<<32-1)},
		after:  []Subflow{sf(1, 900, 19)},
		pct:    f64(2),
	}, {
		// Born with two SYN retransmissions and one data segment: at most
		// that segment was a retransmission (the SYNs carry no data).
		name:   "retransmissions of segments without data are not counted",
		before: []Subflow{sf(1, 1_000, 0)},
		after:  []Subflow{sf(1, 1_099, 0), sf(2, 1, 2)},
		pct:    f64(1),
	}, {
		name:   "plain TCP from the WAT's address is not counted",
		before: []Subflow{sf(1, 0, 0), {Src: nr, Cookie: 2}},
		after:  []Subflow{sf(1, 1_000, 10), segments(Subflow{Src: nr, Cookie: 2}, 1_000, 1_000)},
		pct:    f64(1),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			a := Aggregator{MPTCPOnly: true}
			t0 := time.Unix(100, 0)
			if first := a.Sample(t0, tc.before, wats)["nr"]; first.UL.RetransPct != nil {
				t.Errorf("first sample: retrans_pct %v, want absent", *first.UL.RetransPct)
			}
			got := a.Sample(t0.Add(time.Second), tc.after, wats)["nr"]
			if diff := cmp.Diff(tc.pct, got.UL.RetransPct); diff != "" {
				t.Errorf("retrans_pct (-want +got):\n%s", diff)
			}
			if got.DL.RetransPct != nil {
				t.Errorf("the receiving direction reports retrans_pct %v", *got.DL.RetransPct)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("aggregated telemetry does not validate: %v", err)
			}
		})
	}
	// The proxy sends the downlink: its retransmissions are dl's.
	cpeNR := netip.MustParseAddr("10.31.1.2")
	remote := func(dataSegsOut, retrans uint32) []Subflow {
		return []Subflow{segments(Subflow{Src: netip.MustParseAddr("10.31.0.1"), Dst: cpeNR, Cookie: 1, MPTCP: true}, dataSegsOut, retrans)}
	}
	a := Aggregator{MPTCPOnly: true, Remote: true}
	proxyWATs := map[string]WATInfo{"nr": {Addr: cpeNR, Up: true}}
	a.Sample(time.Unix(100, 0), remote(0, 0), proxyWATs)
	got := a.Sample(time.Unix(101, 0), remote(400, 10), proxyWATs)["nr"]
	if got.UL != nil || got.DL == nil || got.DL.RetransPct == nil || *got.DL.RetransPct != 2.5 {
		t.Errorf("proxy: %+v (dl %+v), want dl retrans_pct 2.5 only", got, got.DL)
	}
}

// chronoSF is an MPTCP subflow with chrono times (µs) and a delivery rate
// (bytes/s). Its window (10 x 1000 bytes) and RTT (100 ms) are such that a
// delivery of 1 MB/s fills the window: the fill binds only where a case
// says so.
func chronoSF(src netip.Addr, cookie, acked, busy, rwnd, sndbuf, rate uint64) Subflow {
	return Subflow{
		Src: src, Cookie: cookie, MPTCP: true, Cwnd: 10, SndMSS: 1000, RTTMicros: 100_000, BytesAcked: acked,
		HasChrono: true, BusyMicros: busy, RwndLimitedMicros: rwnd, SndbufLimitedMicros: sndbuf,
		DeliveryRate: rate,
	}
}

// window sets a subflow's congestion window (segments) and RTT (µs).
func window(s Subflow, cwnd, mss, rttUs uint32) Subflow {
	s.Cwnd, s.SndMSS, s.RTTMicros = cwnd, mss, rttUs
	return s
}

// queued sets the bytes written but not yet sent.
func queued(s Subflow, notsent uint32) Subflow {
	s.NotsentBytes = notsent
	return s
}

// rtts sets a subflow's smoothed and least RTT (µs).
func rtts(s Subflow, srtt, least uint32) Subflow {
	s.RTTMicros, s.MinRTTMicros = srtt, least
	return s
}

// recovering sets a subflow's loss-recovery state, its count of timeouts
// and its total time in RTO recovery (ms; Linux 6.7's tcpi_total_rto and
// tcpi_total_rto_time).
func recovering(s Subflow, caState, backoff uint8, rtos uint16, rtoMs uint32) Subflow {
	s.CAState, s.Backoff, s.HasRTOTime, s.RTOs, s.RTORecoveryMillis = caState, backoff, true, rtos, rtoMs
	return s
}

// stalled sets the time since the subflow's last ACK (ms).
func stalled(s Subflow, ms uint32) Subflow {
	s.LastAckRecvMillis = ms
	return s
}

// TestAggregatorSaturation runs two samples one second apart per case and
// checks the WAT's saturation and delivery rate after the second.
func TestAggregatorSaturation(t *testing.T) {
	nr := netip.MustParseAddr("10.31.1.1")
	wats := map[string]WATInfo{"nr": {Addr: nr, Up: true}}
	for _, tc := range []struct {
		name          string
		before, after []Subflow
		sat, rateMbps *float64
	}{{
		name:     "path-limited the whole second",
		before:   []Subflow{chronoSF(nr, 1, 0, 5_000_000, 0, 0, 0)},
		after:    []Subflow{chronoSF(nr, 1, 1_000_000, 6_000_000, 0, 0, 1_000_000)},
		sat:      f64(1),
		rateMbps: f64(8),
	}, {
		name:     "busy a quarter of the second (app-limited, idle the rest)",
		before:   []Subflow{chronoSF(nr, 1, 0, 5_000_000, 0, 0, 0)},
		after:    []Subflow{chronoSF(nr, 1, 125_000, 5_250_000, 0, 0, 2_500_000)},
		sat:      f64(0.25),
		rateMbps: f64(20),
	}, {
		name:     "busy but receive-window and send-buffer limited",
		before:   []Subflow{chronoSF(nr, 1, 0, 0, 0, 0, 0)},
		after:    []Subflow{chronoSF(nr, 1, 1_000_000, 1_000_000, 600_000, 300_000, 8000)},
		sat:      f64(0.1),
		rateMbps: f64(0.064),
	}, {
		// Case 1 of the real-stack bench: a bulk MPTCP writer's subflow
		// filling the path (1 MB/s fills the window), its chrono stuck on
		// send-buffer limited (the connection's), its srtt 100 ms over a
		// least RTT of 1 ms: the bottleneck's queue stands.
		name:     "send-buffer limited behind a standing network queue: path-limited",
		before:   []Subflow{rtts(chronoSF(nr, 1, 0, 5_000_000, 0, 5_000_000, 0), 100_000, 1000)},
		after:    []Subflow{rtts(chronoSF(nr, 1, 1_000_000, 6_000_000, 0, 6_000_000, 1_000_000), 100_000, 1000)},
		sat:      f64(1),
		rateMbps: f64(8),
	}, {
		name:     "receive-window limited behind a standing network queue: path-limited",
		before:   []Subflow{rtts(chronoSF(nr, 1, 0, 5_000_000, 5_000_000, 0, 0), 100_000, 1000)},
		after:    []Subflow{rtts(chronoSF(nr, 1, 1_000_000, 6_000_000, 5_800_000, 0, 1_000_000), 100_000, 1000)},
		sat:      f64(1),
		rateMbps: f64(8),
	}, {
		// Held by its window below the path's rate: no queue builds.
		name:     "limited without a network queue: not the path",
		before:   []Subflow{rtts(chronoSF(nr, 1, 0, 5_000_000, 0, 5_000_000, 0), 100_000, 60_000)},
		after:    []Subflow{rtts(chronoSF(nr, 1, 1_000_000, 6_000_000, 0, 6_000_000, 1_000_000), 100_000, 60_000)},
		sat:      f64(0),
		rateMbps: f64(8),
	}, {
		name:     "network queue at one end only: the limited time stays out",
		before:   []Subflow{rtts(chronoSF(nr, 1, 0, 5_000_000, 0, 5_000_000, 0), 100_000, 90_000)},
		after:    []Subflow{rtts(chronoSF(nr, 1, 1_000_000, 6_000_000, 0, 5_600_000, 1_000_000), 100_000, 1000)},
		sat:      f64(0.4),
		rateMbps: f64(8),
	}, {
		// 100 kB/s x 30 ms in flight of a 14 x 1448 byte window, as the
		// WRR low-weight case: a queue others keep does not make a
		// trickle the path's rate.
		name:     "network queue but the window barely used: the fill decides",
		before:   []Subflow{rtts(window(chronoSF(nr, 1, 0, 0, 0, 0, 0), 14, 1448, 30_000), 30_000, 1000)},
		after:    []Subflow{rtts(window(chronoSF(nr, 1, 100_000, 1_000_000, 0, 1_000_000, 100_000), 14, 1448, 30_000), 30_000, 1000)},
		sat:      f64(0.197),
		rateMbps: f64(0.8),
	}, {
		// Case 2 of the real-stack bench: out of a floor's queue, the
		// subflow timed out: its window is one segment, its srtt the
		// queue's 2 s, so rate x srtt overfills the window and the timer's
		// wait counts as busy. Both would read 8 kB/s as the path's rate.
		name:     "in RTO recovery at the end of the interval: censored",
		before:   []Subflow{recovering(window(chronoSF(nr, 1, 0, 0, 0, 0, 0), 4, 1448, 2_000_000), 0, 0, 1, 500)},
		after:    []Subflow{recovering(window(chronoSF(nr, 1, 8000, 1_000_000, 0, 0, 8000), 1, 1448, 2_000_000), caLoss, 2, 1, 1500)},
		sat:      f64(0),
		rateMbps: f64(0.064),
	}, {
		// Zero-window probes back the timer off too, and count no RTO time.
		name:     "timer backed off at the start of the interval: censored",
		before:   []Subflow{recovering(window(chronoSF(nr, 1, 0, 0, 0, 0, 0), 1, 1448, 2_000_000), 0, 3, 0, 0)},
		after:    []Subflow{recovering(window(chronoSF(nr, 1, 8000, 1_000_000, 0, 0, 8000), 2, 1448, 2_000_000), 0, 0, 0, 0)},
		sat:      f64(0),
		rateMbps: f64(0.064),
	}, {
		// Open at both ends, but a timeout fired and was recovered from
		// in between (tcpi_total_rto_time grew): it stalled for the
		// timeout before, and its srtt may be the stale one of before it.
		name:     "a timeout recovered from within the interval: censored",
		before:   []Subflow{recovering(chronoSF(nr, 1, 0, 0, 0, 0, 0), 0, 0, 1, 100)},
		after:    []Subflow{recovering(chronoSF(nr, 1, 1_000_000, 1_000_000, 0, 0, 1_000_000), 0, 0, 2, 700)},
		sat:      f64(0),
		rateMbps: f64(8),
	}, {
		name:     "a timeout counted within the interval (its recovery under a millisecond): censored",
		before:   []Subflow{recovering(chronoSF(nr, 1, 0, 0, 0, 0, 0), 0, 0, 1, 100)},
		after:    []Subflow{recovering(chronoSF(nr, 1, 1_000_000, 1_000_000, 0, 0, 1_000_000), 0, 0, 2, 100)},
		sat:      f64(0),
		rateMbps: f64(8),
	}, {
		name:     "subflow born during the interval that timed out: censored",
		before:   nil,
		after:    []Subflow{recovering(chronoSF(nr, 9, 1_000_000, 1_000_000, 0, 0, 1_000_000), 0, 0, 1, 300)},
		sat:      f64(0),
		rateMbps: f64(8),
	}, {
		// Case 2 before its timeout fires: the stale 2 s srtt makes
		// rate x srtt fill the window, and the wait counts as busy, but no
		// ACK came for the last 700 ms of the second.
		name:     "stalled since its last ACK: that time is not path-limited",
		before:   []Subflow{window(chronoSF(nr, 1, 0, 0, 0, 0, 0), 4, 1448, 2_000_000)},
		after:    []Subflow{stalled(window(chronoSF(nr, 1, 8000, 1_000_000, 0, 0, 8000), 4, 1448, 2_000_000), 700)},
		sat:      f64(0.3),
		rateMbps: f64(0.064),
	}, {
		name:     "fast recovery at both ends: a path-limited sender's loss, counted",
		before:   []Subflow{recovering(chronoSF(nr, 1, 0, 5_000_000, 0, 0, 0), 3, 0, 0, 0)},
		after:    []Subflow{recovering(chronoSF(nr, 1, 1_000_000, 6_000_000, 0, 0, 1_000_000), 3, 0, 0, 0)},
		sat:      f64(1),
		rateMbps: f64(8),
	}, {
		name:     "jiffy rounding beyond the interval is clipped",
		before:   []Subflow{chronoSF(nr, 1, 0, 0, 0, 0, 0)},
		after:    []Subflow{chronoSF(nr, 1, 1_000_000, 1_004_000, 0, 0, 8000)},
		sat:      f64(1),
		rateMbps: f64(0.064),
	}, {
		// The trap: data always in flight (busy the whole second), but
		// 100 kB/s x 30 ms = 3000 bytes in flight of a 14 x 1448 byte
		// window: 0.148 of it, 0.197 of FullFill.
		name:     "busy the whole time with the window barely used (WRR low weight)",
		before:   []Subflow{window(chronoSF(nr, 1, 0, 0, 0, 0, 0), 14, 1448, 30_000)},
		after:    []Subflow{window(chronoSF(nr, 1, 100_000, 1_000_000, 0, 0, 100_000), 14, 1448, 30_000)},
		sat:      f64(0.197),
		rateMbps: f64(0.8),
	}, {
		// 150 kB/s x 100 ms = 15 kB in flight; the mean window is
		// (20 + 60) / 2 x 1000 = 40 kB: fill 0.375, 0.5 of FullFill (the
		// window at the end alone would give 0.333).
		name:     "window is the mean of both ends of the interval",
		before:   []Subflow{window(chronoSF(nr, 1, 0, 0, 0, 0, 0), 20, 1000, 100_000)},
		after:    []Subflow{window(chronoSF(nr, 1, 150_000, 1_000_000, 0, 0, 150_000), 60, 1000, 100_000)},
		sat:      f64(0.5),
		rateMbps: f64(1.2),
	}, {
		name:     "RTT is the mean of both ends of the interval",
		before:   []Subflow{window(chronoSF(nr, 1, 0, 0, 0, 0, 0), 40, 1000, 50_000)},
		after:    []Subflow{window(chronoSF(nr, 1, 150_000, 1_000_000, 0, 0, 150_000), 40, 1000, 150_000)},
		sat:      f64(0.5),
		rateMbps: f64(1.2),
	}, {
		// The window is barely used on average (fill 0.197 as above), but
		// two full segments wait to be sent at both ends of the interval:
		// the path holds them back.
		name:     "standing queue at both ends: path-limited whatever the fill",
		before:   []Subflow{queued(window(chronoSF(nr, 1, 0, 0, 0, 0, 0), 14, 1448, 30_000), 2896)},
		after:    []Subflow{queued(window(chronoSF(nr, 1, 100_000, 900_000, 0, 0, 100_000), 14, 1448, 30_000), 2896)},
		sat:      f64(0.9),
		rateMbps: f64(0.8),
	}, {
		name:     "queue at one end only: the fill decides",
		before:   []Subflow{window(chronoSF(nr, 1, 0, 0, 0, 0, 0), 14, 1448, 30_000)},
		after:    []Subflow{queued(window(chronoSF(nr, 1, 100_000, 1_000_000, 0, 0, 100_000), 14, 1448, 30_000), 1<<20)},
		sat:      f64(0.197),
		rateMbps: f64(0.8),
	}, {
		name:     "less than a segment queued (Nagle): the fill decides",
		before:   []Subflow{queued(window(chronoSF(nr, 1, 0, 0, 0, 0, 0), 14, 1448, 30_000), 1000)},
		after:    []Subflow{queued(window(chronoSF(nr, 1, 100_000, 1_000_000, 0, 0, 100_000), 14, 1448, 30_000), 1447)},
		sat:      f64(0.197),
		rateMbps: f64(0.8),
	}, {
		name:     "standing queue of a subflow born during the interval",
		before:   nil,
		after:    []Subflow{queued(window(chronoSF(nr, 9, 100_000, 600_000, 0, 0, 100_000), 14, 1448, 30_000), 5000)},
		sat:      f64(0.6),
		rateMbps: f64(0.8),
	}, {
		name: "bytes-weighted over subflows",
		before: []Subflow{
			chronoSF(nr, 1, 0, 0, 0, 0, 0),
			chronoSF(nr, 2, 0, 0, 0, 0, 0),
		},
		after: []Subflow{
			chronoSF(nr, 1, 3_000_000, 1_000_000, 0, 0, 3_000_000), // saturated, 3 MB
			chronoSF(nr, 2, 1_000_000, 0, 0, 0, 1_000_000),         // never busy, 1 MB
		},
		sat:      f64(0.75),
		rateMbps: f64(32),
	}, {
		name: "an idle subflow does not dilute a saturated one",
		before: []Subflow{
			chronoSF(nr, 1, 0, 0, 0, 0, 0),
			chronoSF(nr, 2, 0, 0, 0, 0, 9_000_000), // stale rate sample
		},
		after: []Subflow{
			chronoSF(nr, 1, 1_000_000, 1_000_000, 0, 0, 1_000_000),
			chronoSF(nr, 2, 0, 0, 0, 0, 9_000_000),
		},
		sat:      f64(1),
		rateMbps: f64(8),
	}, {
		name:   "stalled path: busy, nothing delivered: no capacity sample",
		before: []Subflow{chronoSF(nr, 1, 500, 0, 0, 0, 100_000)},
		after:  []Subflow{chronoSF(nr, 1, 500, 1_000_000, 0, 0, 100_000)},
		sat:    f64(0),
	}, {
		name:   "idle: nothing sent, nothing waiting",
		before: []Subflow{chronoSF(nr, 1, 500, 70, 0, 0, 100_000)},
		after:  []Subflow{chronoSF(nr, 1, 500, 70, 0, 0, 100_000)},
		sat:    f64(0),
	}, {
		name:     "subflow born during the interval counts from zero",
		before:   nil,
		after:    []Subflow{chronoSF(nr, 7, 500_000, 500_000, 0, 0, 1_000_000)},
		sat:      f64(0.5),
		rateMbps: f64(8),
	}, {
		name:     "no window: nothing was limited by it",
		before:   []Subflow{window(chronoSF(nr, 1, 0, 0, 0, 0, 0), 0, 0, 0)},
		after:    []Subflow{window(chronoSF(nr, 1, 1_000_000, 1_000_000, 0, 0, 1_000_000), 0, 0, 0)},
		sat:      f64(0),
		rateMbps: f64(8),
	}, {
		name:     "kernel without chrono times: unknown",
		before:   []Subflow{{Src: nr, Cookie: 1, MPTCP: true}},
		after:    []Subflow{{Src: nr, Cookie: 1, MPTCP: true, BytesAcked: 1000, DeliveryRate: 1000}},
		rateMbps: f64(0.008),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var a Aggregator
			t0 := time.Unix(100, 0)
			a.Sample(t0, tc.before, wats)
			got := a.Sample(t0.Add(time.Second), tc.after, wats)["nr"]
			if diff := cmp.Diff(tc.sat, got.UL.Saturated); diff != "" {
				t.Errorf("saturated (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.rateMbps, got.UL.DeliveryRateMbps); diff != "" {
				t.Errorf("delivery_rate_mbps (-want +got):\n%s", diff)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("aggregated telemetry does not validate: %v", err)
			}
		})
	}
}

// TestAggregatorOwnCap checks that a WAT held by the agent's own cap
// reports saturated 0 (censored) however path-limited its subflows look:
// the subflow below delivers 8 Mbit/s with a standing queue the whole
// second (saturated 1 without a cap), as it does through the agent's HTB.
func TestAggregatorOwnCap(t *testing.T) {
	nr := netip.MustParseAddr("10.31.1.1")
	before := []Subflow{queued(chronoSF(nr, 1, 0, 5_000_000, 0, 0, 0), 5000)}
	after := []Subflow{queued(chronoSF(nr, 1, 1_000_000, 6_000_000, 0, 0, 1_000_000), 5000)}
	bare := []Subflow{{Src: nr, Cookie: 1, MPTCP: true}}
	bareAfter := []Subflow{{Src: nr, Cookie: 1, MPTCP: true, BytesAcked: 1_000_000}}
	// Send-buffer limited all second behind a 100 ms RTT over a least RTT
	// of 1 ms: a standing queue, which may be the cap's own HTB.
	heldBefore := []Subflow{rtts(chronoSF(nr, 1, 0, 5_000_000, 0, 5_000_000, 0), 100_000, 1000)}
	heldAfter := []Subflow{rtts(chronoSF(nr, 1, 1_000_000, 6_000_000, 0, 6_000_000, 1_000_000), 100_000, 1000)}
	for _, tc := range []struct {
		name                      string
		capBefore, capNow         float64
		flooredBefore, flooredNow bool
		before, after             []Subflow
		sat                       *float64
	}{
		{name: "no cap: the path held it", sat: f64(1)},
		{name: "held by its cap (0.94 of it, HTB goodput)", capBefore: 8.5, capNow: 8.5, sat: f64(0)},
		{name: "at CappedFill of the cap", capBefore: 9.4, capNow: 9.4, sat: f64(0)},
		{name: "just under CappedFill: the path held it", capBefore: 9.5, capNow: 9.5, sat: f64(1)},
		{name: "cap far above: the path held it", capBefore: 20, capNow: 20, sat: f64(1)},
		{name: "cap set during the interval", capNow: 9, sat: f64(0)},
		{name: "cap lowered during the interval", capBefore: 20, capNow: 9, sat: f64(0)},
		{name: "cap raised during the interval: the one that held", capBefore: 9, capNow: 30, sat: f64(0)},
		{name: "cap removed during the interval", capBefore: 9, sat: f64(0)},
		{name: "kernel without chrono times: censored, not unknown", capBefore: 8.5, capNow: 8.5,
			before: bare, after: bareAfter, sat: f64(0)},
		{name: "floored all along", flooredBefore: true, flooredNow: true, sat: f64(0)},
		{name: "floor lifted during the interval", flooredBefore: true, sat: f64(0)},
		{name: "window-limited behind a queue, no cap: the network's queue, the path held it",
			before: heldBefore, after: heldAfter, sat: f64(1)},
		// The lossy bench's spiral: the cap's own queue read as the
		// network's made a loss-limited rate under the cap the capacity.
		{name: "window-limited behind a queue under a cap it does not fill: the agent's queue",
			capBefore: 20, capNow: 20, before: heldBefore, after: heldAfter, sat: f64(0)},
		{name: "window-limited behind a queue, cap removed during the interval",
			capBefore: 20, before: heldBefore, after: heldAfter, sat: f64(0)},
		{name: "window-limited behind a queue, floored", flooredNow: true,
			before: heldBefore, after: heldAfter, sat: f64(0)},
		{name: "floored during the interval", flooredNow: true, sat: f64(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, n := tc.before, tc.after
			if b == nil {
				b, n = before, after
			}
			var a Aggregator
			t0 := time.Unix(100, 0)
			a.Sample(t0, b, map[string]WATInfo{"nr": {Addr: nr, Up: true, CapMbps: tc.capBefore, Floored: tc.flooredBefore}})
			got := a.Sample(t0.Add(time.Second), n, map[string]WATInfo{"nr": {Addr: nr, Up: true, CapMbps: tc.capNow, Floored: tc.flooredNow}})["nr"]
			if got.UL.DeliveredMbps != 8 {
				t.Fatalf("delivered %v Mbit/s, want 8", got.UL.DeliveredMbps)
			}
			if diff := cmp.Diff(tc.sat, got.UL.Saturated); diff != "" {
				t.Errorf("saturated (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAggregatorRemoteOwnCap: on a proxy the cap is the served CPE's
// downlink cap on the WAT, and the sending direction is dl.
func TestAggregatorRemoteOwnCap(t *testing.T) {
	cpe, proxy := netip.MustParseAddr("10.31.1.2"), netip.MustParseAddr("10.31.0.1")
	sf := func(acked uint64) Subflow {
		s := queued(chronoSF(proxy, 1, acked, acked*5, 0, 0, 1_000_000), 5000)
		s.Dst = cpe
		return s
	}
	for capMbps, want := range map[float64]float64{0: 1, 8.5: 0} {
		wats := map[string]WATInfo{"nr": {Addr: cpe, Up: true, CapMbps: capMbps}}
		a := Aggregator{MPTCPOnly: true, Remote: true}
		t0 := time.Unix(100, 0)
		a.Sample(t0, []Subflow{sf(0)}, wats)
		got := a.Sample(t0.Add(time.Second), []Subflow{sf(1_000_000)}, wats)["nr"]
		if got.DL == nil || got.DL.Saturated == nil || *got.DL.Saturated != want {
			t.Errorf("cap %v: dl %+v, want saturated %v", capMbps, got.DL, want)
		}
	}
}
