package telemetry

import (
	"net/netip"
	"time"

	"github.com/mcw-xapp/kernel-agent/payload"
)

// Aggregator turns successive subflow dumps into per-WAT figures. Delivered
// throughput is the growth of bytes_acked between two samples, per socket
// (keyed by its cookie), so subflows that come and go are counted fairly.
//
// Saturation answers the censoring question of the capacity model: under
// WRR with cwnd_limited=N a WAT's delivered throughput equals its capacity
// only while its subflow was the bottleneck. Per subflow it is the smaller
// of two fractions, each clipped to [0, 1]:
//
//   - busy: the growth of the time the socket had data queued or in flight
//     and was limited by neither the receive window nor the send buffer
//     (tcp_info chrono statistics, see Subflow), less the time since its
//     last ACK at the end of the interval (a stall delivers nothing,
//     whatever holds it), divided by the interval; the limited times count
//     too when the subflow's smoothed RTT shows a standing queue in the
//     network at both ends of the interval (at the end for a subflow born
//     during it; Subflow.NetworkQueued): a sender held by the receiver's
//     window or its send buffer with the bottleneck's queue standing has
//     a window larger than the path's bandwidth-delay product, so the
//     path, not the window, sets its rate;
//   - fill: the mean data in flight over the interval (Little's law:
//     delivered bytes per second times the smoothed RTT) divided by the
//     congestion window (in bytes; window and RTT are the means of their
//     values at both ends of the interval), divided by FullFill; or 1 when
//     the subflow had a standing queue: at least one full segment written
//     but not yet sent (tcpi_notsent_bytes >= MSS) at both ends of the
//     interval (at the end for a subflow born during it). A full segment
//     waiting is held back by the window, pacing or the local qdisc (TCP
//     small queues), all of them the path; Nagle holds back less.
//
// Busy time alone is not enough: it counts data in flight as well as data
// queued, so a sender far below the path's rate that always has a packet in
// flight (a long RTT, or a queue it shares with others) is busy the whole
// time, and so is the low-weight subflow of a WRR connection, whose share
// keeps trickling while its window is never full. The fill tells those
// apart: they keep a small part of their window in flight, a path-limited
// subflow keeps it nearly full (TestSaturationInNetns measures both through
// one tbf bottleneck: 0.2 and 1).
//
// The limited times alone are not enough either. A bulk MPTCP writer's
// subflows can read as send-buffer limited while their congestion windows
// hold them (the chrono tracks the connection's buffer: see Subflow, from
// the kernel's code). On the real-stack bench (50 ms bottleneck buffers,
// no propagation delay) a Wi-Fi subflow delivering 7-7.8 Mbit/s of its 8,
// with an srtt of 25-50 ms, reported saturated exactly 0 for a dozen
// periods (the fill cannot give 0 at that rate and RTT: all its busy time
// was counted as limited), and a proxy every downlink period at 93 % of
// the link rate. The standing queue
// in the network tells that time apart from a sender truly held below the
// path's rate, which builds no queue; the fill still applies to it.
//
// A subflow that went through a retransmission timeout in the interval,
// or was recovering from one at either end of it (TCP_CA_Loss, a backed-off
// timer, tcpi_total_rto or tcpi_total_rto_time grown; Subflow), counts 0:
// it waited out the timer (busy, delivering nothing), and its window and
// RTT are the timeout's, one segment and the RTT from before it, often a
// queue's seconds, so the rate times that RTT overfills the window. On the
// bench such a subflow, out of the floor's 8 s queue (below), read as
// path-limited at under 1 Mbit/s and the forecast collapsed to it. Fast
// recovery is not a timeout: a path-limited sender's losses end in it, and
// a lossy path's rate is the path's.
//
// Per WAT the subflows are averaged weighted by the bytes each delivered in
// the interval, so the figure is the share of the WAT's delivered bytes that
// were carried while the path was the limit, the share of delivered_mbps
// that measures capacity. A WAT that delivered nothing reports 0 (nothing
// was in flight on average, so no window was full; a dead path is the link
// watcher's business), and so does a WAT without subflows: nothing waited
// for it.
//
// A WAT held by the agent's own rate cap (WATInfo.CapMbps: the HTB or
// pacing of the backend) reports saturated 0 whatever its subflows show:
// its subflows queue in the agent's own qdisc, which the fill counts as the
// path (see FullFill), but what they deliver is the cap, a lower bound of
// the capacity, not a measurement of it. Read as a measurement, the cap
// becomes the forecast and the next cap is set below it (an urgent class
// caps a WAT at a fraction of its forecast): the forecast spirals down.
// Censored, it is explored upwards by the xApp's estimators. A WAT counts
// as held by its cap when it delivered at least CappedFill of it (the
// smaller of the caps at both ends of the interval, so that a cap set or
// lowered during it counts). A WAT on which the agent held the default
// rule's traffic at its floor (WATInfo.Floored) at either end of the
// interval reports 0 too: that traffic (on a CPE, with the ACKs of every
// downlink connection not in a class) waited in a queue of seconds at the
// floor's rate, its subflows' windows are full of it and their RTTs are
// that queue's, and what the WAT delivered is the floor's and the classes'
// share, not its capacity.
//
// Retransmissions (retrans_pct) are the share of the WAT's data segments
// sent in the interval that were retransmissions: the growth of
// tcpi_total_retrans over the growth of tcpi_data_segs_out, summed over the
// subflows. A retransmitted segment is also a data segment sent, so the
// figure is at most 100 (100: nothing but retransmissions, an RTO backing
// off on a dead path). Retransmissions beyond a subflow's data segments in
// the interval are of segments without data (a SYN or SYN-ACK of a subflow
// born during it) and are not counted. Absent when the WAT sent no data
// segment. The share counts what the sender resent, not what the path
// lost: spurious retransmissions count, and losses repaired by a tail loss
// probe (which tcpi_total_retrans leaves out) do not.
//
// Known limits: a stall that began in the interval before and ended
// without a timeout early in this one still counts as busy here (the
// interval before did not count its share). A queue in the network that
// other senders keep makes a subflow held by a small receive window or
// send buffer read as path-limited where its congestion window is full
// (the fill); its rate is then the share the queue leaves it, as for a
// congestion-limited sender sharing the bottleneck. A long-lived
// application-limited sender whose congestion window has decayed to the
// window it uses (Linux shrinks an unused window towards the used one
// after an RTO without being window-limited) fills its window although it
// is not path-limited. The standing send-queue test is what mainline MPTCP
// shows for a bulk sender (it queues ahead into its subflows: 1 MB
// measured); the WRR kernel with cwnd_limited feeds a subflow only while
// its window is open, so there the fill decides.
//
// It is not safe for concurrent use.
type Aggregator struct {
	// MPTCPOnly restricts the sum to MPTCP subflows (sockets with the
	// "mptcp" ULP); otherwise every TCP socket from the WAT's address counts.
	MPTCPOnly bool
	// Remote matches a subflow to a WAT by its remote address instead of
	// its source address: a proxy's subflows to a CPE end at the CPE's WAT
	// addresses. The reporting end then sends the downlink and the figures
	// go to dl; otherwise (a CPE) they go to ul, and what the CPE received
	// (tcpi_bytes_received) is reported as dl.
	Remote bool

	last     map[uint64]sockState
	lastTime time.Time
	lastCap  map[string]float64 // per WAT, the cap at the last sample
	lastHeld map[string]bool    // per WAT, floored at the last sample
}

// FullFill is the mean share of the congestion window in flight at which a
// busy subflow without a standing send queue counts as fully path-limited
// (a standing queue in the network lifts the exclusion of the window- and
// buffer-limited time from busy, not the fill: see Aggregator). Below
// 1 because a saturated subflow's window saws (loss halves it, growth
// overshoots between samples) and a local bottleneck keeps part of the
// window in the qdisc under TCP small queues: through a tbf bottleneck a
// bulk sender's fill measured 0.45 to 0.8 (one-second intervals, under
// load), an application-limited sender sharing it 0.13 to 0.29.
const FullFill = 0.75

// QueueRTTRatio and QueueMinDelay tell a standing queue in the network
// (Subflow.NetworkQueued): a smoothed RTT at least twice the least RTT and
// 5 ms above it. The smoothed RTT of a path without a queue stays within
// its jitter of the least one (the smoothing averages a burst out), and
// 5 ms covers a short Wi-Fi hop's aggregation; a bottleneck buffer of tens
// of milliseconds (50 ms in the real-stack bench's shaping, where the least
// RTT is under a millisecond: 25 to 50 ms measured) is far beyond both.
// Erring low here is cheap (the time the sender was held by a window or a
// buffer stays excluded: censored, explored); erring high would read a
// window-limited rate as the path's.
const (
	QueueRTTRatio = 2
	QueueMinDelay = 5 * time.Millisecond
)

// CappedFill is the share of a WAT's cap that its delivered throughput must
// reach for the cap to count as what held it. Goodput through an HTB at
// rate C is about 0.93 to 0.95 C: the cap counts link-layer bytes, the
// goodput only TCP payload (1448 of 1514 bytes per full frame, less with
// MPTCP's options), and a one-second interval catches the token bucket's
// bursts unevenly. 0.85 leaves room for that and for a cap applied during
// the interval. Erring low is cheap: a path-limited WAT whose capacity lies
// just under its cap is reported censored and explored one step upwards;
// its next cap, above the capacity, lets the path show it. Erring high
// would read the cap as the capacity (the spiral above). Reading the HTB
// classes' backlog would tell it directly, but needs the qdisc statistics
// of every WAT (and of every served CPE on a proxy) on each sample, from
// the sampler's goroutine, which does not own the backend.
const CappedFill = 0.85

// sockState is what the aggregator remembers of a socket between samples.
type sockState struct {
	acked, received   uint64
	busy, pathLimited uint64
	chrono            bool
	cwnd, rttMicros   uint32
	queued            bool // a full segment written but not sent
	netQueued         bool // a standing queue in the network (NetworkQueued)
	inRTO             bool // recovering from a retransmission timeout
	hasRTOTime        bool
	rtos              uint16
	rtoMillis         uint32
	dataSegs          uint32
	retrans           uint32
}

// WATInfo is what the aggregator needs per WAT.
type WATInfo struct {
	Addr netip.Addr
	Up   bool
	// CapMbps is the most the agent's own rate cap lets the WAT send in
	// the sending direction (0: not capped by the agent).
	CapMbps float64
	// Floored: the agent holds the default rule's traffic on the WAT at
	// its floor in the sending direction (the rule's weight there is 0 and
	// a traffic class uses the WAT, so the WAT cannot be made backup).
	Floored bool
}

// watSums accumulates one WAT's subflows during a sample.
type watSums struct {
	rttMs          float64
	delivered      uint64
	received       uint64 // bytes received in the interval
	chronoSubflows int
	satBytes       float64 // sum of fraction x bytes delivered
	freshRate      uint64  // bytes/s, subflows that delivered in the interval
	fresh          int
	dataSegs       uint64 // data segments sent in the interval
	retrans        uint64 // of which retransmissions
}

// Sample folds one dump taken at now into per-WAT telemetry: the sending
// direction (ul, or dl with Remote) with every sender figure, and on a CPE
// the receiving direction (dl) with delivered_mbps and bytes_received. The
// first call only sets the baseline (delivered_mbps 0, saturated,
// delivery_rate_mbps and retrans_pct absent, i.e. unknown).
func (a *Aggregator) Sample(now time.Time, subflows []Subflow, wats map[string]WATInfo) map[string]payload.WATTelemetry {
	byAddr := make(map[netip.Addr]string, len(wats))
	// dirs sums one WAT's counters over its subflows.
	type dirs struct {
		t                     payload.WATTelemetry
		acked, received, cwnd int64
	}
	out := make(map[string]*dirs, len(wats))
	for name, w := range wats {
		out[name] = &dirs{t: payload.WATTelemetry{Up: w.Up}}
		if w.Addr.IsValid() {
			byAddr[w.Addr] = name
		}
	}
	first := a.last == nil
	seconds := now.Sub(a.lastTime).Seconds()
	next := make(map[uint64]sockState, len(subflows))
	sums := map[string]*watSums{}
	held := a.holds(wats)
	for _, s := range subflows {
		if a.MPTCPOnly && !s.MPTCP {
			continue
		}
		match := s.Src
		if a.Remote {
			match = s.Dst
		}
		name, ok := byAddr[match]
		if !ok {
			continue
		}
		cur := sockState{acked: s.BytesAcked, received: s.BytesRecv, busy: s.BusyMicros, pathLimited: s.PathLimitedMicros(), chrono: s.HasChrono,
			cwnd: s.Cwnd, rttMicros: s.RTTMicros, queued: s.SndMSS > 0 && s.NotsentBytes >= s.SndMSS, netQueued: s.NetworkQueued(),
			inRTO: s.InRTORecovery(), hasRTOTime: s.HasRTOTime, rtos: s.RTOs, rtoMillis: s.RTORecoveryMillis, dataSegs: s.DataSegsOut, retrans: s.TotalRetrans}
		next[s.Cookie] = cur
		prev, seen := a.last[s.Cookie]
		g := cur.growthSince(prev, seen, first)
		w := sums[name]
		if w == nil {
			w = &watSums{}
			sums[name] = w
		}
		w.delivered += g.acked
		w.received += g.received
		w.dataSegs += uint64(g.dataSegs)
		w.retrans += uint64(min(g.retrans, g.dataSegs)) // the rest carried no data
		w.rttMs += float64(s.RTTMicros) / 1000
		if g.acked > 0 {
			w.freshRate += s.DeliveryRate
			w.fresh++
		}
		if s.HasChrono && (!seen || prev.chrono) && !first && seconds > 0 {
			w.chronoSubflows++
			w.satBytes += pathShare(s, cur, prev, seen, g, seconds, held[name].shaped()) * float64(g.acked)
		}
		d := out[name]
		d.t.Subflows++
		d.cwnd += int64(s.Cwnd)
		d.acked += int64(s.BytesAcked)
		d.received += int64(s.BytesRecv)
	}
	res := make(map[string]payload.WATTelemetry, len(out))
	for name, d := range out {
		w := sums[name]
		if w == nil {
			w = &watSums{}
		}
		t := d.t
		if t.Subflows > 0 {
			t.RTTMs = round3(w.rttMs / float64(t.Subflows))
		}
		send := payload.DirTelemetry{BytesAcked: &d.acked, Cwnd: &d.cwnd}
		recv := payload.DirTelemetry{BytesReceived: &d.received}
		if !first && seconds > 0 {
			rates(&send, &recv, w, t.Subflows, held[name], seconds)
		}
		if a.Remote {
			// The proxy sends the downlink; what it receives from the CPE
			// is the CPE's to report (as the uplink's sender).
			t.DL = &send
		} else {
			t.UL, t.DL = &send, &recv
		}
		res[name] = t
	}
	a.last = next
	a.lastTime = now
	a.lastCap = make(map[string]float64, len(wats))
	a.lastHeld = make(map[string]bool, len(wats))
	for name, w := range wats {
		a.lastCap[name], a.lastHeld[name] = w.CapMbps, w.Floored
	}
	return res
}

// growthOf is how much one socket's counters grew in an interval.
type growthOf struct {
	acked, received, busy, pathLimited uint64
	dataSegs, retrans                  uint32
}

// growthSince is the growth of a socket's counters from prev (seen false:
// the socket was born during the interval, and everything is new) to cur;
// on the first sample (first) nothing grew: it only sets the baseline.
func (cur sockState) growthSince(prev sockState, seen, first bool) growthOf {
	var g growthOf
	switch {
	case seen:
		if cur.acked >= prev.acked {
			g.acked = cur.acked - prev.acked
			g.busy = growth(cur.busy, prev.busy)
			g.pathLimited = growth(cur.pathLimited, prev.pathLimited)
		}
		g.received = growth(cur.received, prev.received)
		// The segment counters are 32 bits wide and wrap (2^32 segments:
		// about 14 hours at 1 Gbit/s); a socket's counters never go back
		// otherwise (its cookie is never reused), so the modular
		// difference is their growth.
		g.dataSegs, g.retrans = cur.dataSegs-prev.dataSegs, cur.retrans-prev.retrans
	case !first:
		g = growthOf{cur.acked, cur.received, cur.busy, cur.pathLimited, cur.dataSegs, cur.retrans}
	}
	return g
}

// pathShare is the share of the interval in which one subflow's delivery
// was limited by its path rather than by its sender (its saturation
// fraction), from its state cur at the interval's end and prev at its start
// (seen false for a subflow born during it) and its counters' growth g;
// shaped: the agent held the subflow's WAT with a cap or a floor at either
// end of the interval.
func pathShare(s Subflow, cur, prev sockState, seen bool, g growthOf, seconds float64, shaped bool) float64 {
	pathMicros := g.pathLimited
	cwnd, rtt := float64(s.Cwnd), float64(s.RTTMicros)
	if seen { // the mean of both ends stands for the interval
		cwnd = (cwnd + float64(prev.cwnd)) / 2
		rtt = (rtt + float64(prev.rttMicros)) / 2
	}
	if !shaped && cur.netQueued && (!seen || prev.netQueued) {
		// Held by a window or a buffer, it still filled the path. Not
		// where the agent shapes the WAT: its own queue (the cap's HTB,
		// the floor's) lengthens the RTT as a network queue would, and a
		// sender held there, by a lossy path's window among others, did
		// not fill the path.
		pathMicros = g.busy
	}
	// Stalled since its last ACK, it delivered nothing whatever held it:
	// not the path's rate.
	pathMicros -= min(pathMicros, uint64(s.LastAckRecvMillis)*1000)
	f := clip01(float64(pathMicros) / 1e6 / seconds)
	window := cwnd * float64(s.SndMSS)
	switch {
	case cur.timedOutSince(prev, seen):
		// It waited out a timeout, and its window and RTT are the
		// timeout's: one segment, and the RTT of before it.
		return 0
	case cur.queued && (!seen || prev.queued):
		// A standing queue: held back by the path all along, f stays the
		// busy share.
		return f
	case window > 0:
		inflight := float64(g.acked) / seconds * rtt / 1e6
		return min(f, clip01(inflight/window/FullFill))
	}
	return 0 // no window: nothing can have been limited by it
}

// rates fills one WAT's per-interval figures (seconds long) from its sums
// w over its subflows and how the agent's own limits held it: delivered
// rates both ways, and in the sending direction saturated,
// delivery_rate_mbps and retrans_pct.
func rates(send, recv *payload.DirTelemetry, w *watSums, subflows int, hold ownHold, seconds float64) {
	send.DeliveredMbps = round3(float64(w.delivered) * 8 / seconds / 1e6)
	recv.DeliveredMbps = round3(float64(w.received) * 8 / seconds / 1e6)
	switch {
	case w.chronoSubflows > 0 && w.delivered > 0:
		send.Saturated = ptr(round3(w.satBytes / float64(w.delivered)))
	case w.chronoSubflows > 0:
		// Nothing delivered: nothing in flight on average, so no window
		// was filled; a dead path is the link watcher's business, not a
		// capacity sample.
		send.Saturated = ptr(0.0)
	case subflows == 0:
		// No subflow on the WAT: nothing waited for it, so its (zero)
		// throughput says nothing about its capacity.
		send.Saturated = ptr(0.0)
	}
	if w.fresh > 0 {
		send.DeliveryRateMbps = ptr(round3(float64(w.freshRate) * 8 / 1e6))
	}
	if hold.floored || hold.capMbps > 0 && send.DeliveredMbps >= CappedFill*hold.capMbps {
		send.Saturated = ptr(0.0)
	}
	if w.dataSegs > 0 {
		send.RetransPct = ptr(round3(float64(w.retrans) * 100 / float64(w.dataSegs)))
	}
}

// timedOutSince tells whether a socket went through a retransmission
// timeout in the interval from prev (the zero state for a socket born
// during it, seen false) to cur, or was recovering from one at either end.
func (cur sockState) timedOutSince(prev sockState, seen bool) bool {
	if !seen {
		prev = sockState{hasRTOTime: cur.hasRTOTime}
	}
	return cur.inRTO || prev.inRTO ||
		cur.hasRTOTime && prev.hasRTOTime && (cur.rtos != prev.rtos || cur.rtoMillis != prev.rtoMillis)
}

// ownHold is how the agent's own limits held a WAT over an interval:
// capMbps the smaller of its caps at both ends (heldCap; 0: none at
// either), floored at either end.
type ownHold struct {
	capMbps float64
	floored bool
}

// shaped tells whether the agent's own qdisc held the WAT at either end.
func (h ownHold) shaped() bool { return h.capMbps > 0 || h.floored }

// holds are the own holds of wats over the interval that ends with them.
func (a *Aggregator) holds(wats map[string]WATInfo) map[string]ownHold {
	out := make(map[string]ownHold, len(wats))
	for name, w := range wats {
		out[name] = ownHold{capMbps: a.heldCap(name, w.CapMbps), floored: w.Floored || a.lastHeld[name]}
	}
	return out
}

// heldCap is the smaller of a WAT's caps at both ends of the interval, cap
// capMbps at its end (0 for an end without one; 0 when neither has one).
func (a *Aggregator) heldCap(name string, capMbps float64) float64 {
	prev := a.lastCap[name]
	switch {
	case prev <= 0:
		return max(capMbps, 0)
	case capMbps <= 0:
		return prev
	}
	return min(prev, capMbps)
}

// growth is how much a cumulative counter grew from prev to cur: 0 if it
// went back (inconsistent chrono readings).
func growth(cur, prev uint64) uint64 {
	if cur < prev {
		return 0
	}
	return cur - prev
}

func clip01(v float64) float64 { return min(max(v, 0), 1) }

func ptr(v float64) *float64 { return &v }

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }
