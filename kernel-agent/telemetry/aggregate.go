package telemetry

import (
	"net/netip"
	"time"

	"github.com/mcw-xapp/kernel-agent/payload"
)

// Aggregator turns successive subflow dumps into per-WAT figures. Delivered
// throughput is the growth of bytes_acked between two samples, per socket
// (keyed by its cookie), so subflows that come and go are counted fairly.
// It is not safe for concurrent use.
type Aggregator struct {
	// MPTCPOnly restricts the sum to MPTCP subflows (sockets with the
	// "mptcp" ULP); otherwise every TCP socket from the WAT's address counts.
	MPTCPOnly bool

	last     map[uint64]uint64
	lastTime time.Time
}

// WATInfo is what the aggregator needs per WAT.
type WATInfo struct {
	Addr netip.Addr
	Up   bool
}

// Sample folds one dump taken at now into per-WAT telemetry. The first call
// only sets the baseline (delivered_mbps 0).
func (a *Aggregator) Sample(now time.Time, subflows []Subflow, wats map[string]WATInfo) map[string]payload.WATTelemetry {
	byAddr := make(map[netip.Addr]string, len(wats))
	out := make(map[string]payload.WATTelemetry, len(wats))
	for name, w := range wats {
		out[name] = payload.WATTelemetry{Up: w.Up}
		if w.Addr.IsValid() {
			byAddr[w.Addr] = name
		}
	}
	first := a.last == nil
	seconds := now.Sub(a.lastTime).Seconds()
	next := make(map[uint64]uint64, len(subflows))
	rttSum := map[string]float64{}
	delivered := map[string]uint64{}
	for _, s := range subflows {
		if a.MPTCPOnly && !s.MPTCP {
			continue
		}
		name, ok := byAddr[s.Src]
		if !ok {
			continue
		}
		next[s.Cookie] = s.BytesAcked
		if prev, seen := a.last[s.Cookie]; seen && s.BytesAcked >= prev {
			delivered[name] += s.BytesAcked - prev
		} else if !seen && !first {
			delivered[name] += s.BytesAcked // born during the interval
		}
		t := out[name]
		t.Subflows++
		t.Cwnd += int64(s.Cwnd)
		t.BytesAcked += int64(s.BytesAcked)
		rttSum[name] += float64(s.RTTMicros) / 1000
		out[name] = t
	}
	for name, t := range out {
		if t.Subflows > 0 {
			t.RTTMs = round3(rttSum[name] / float64(t.Subflows))
		}
		if !first && seconds > 0 {
			t.DeliveredMbps = round3(float64(delivered[name]) * 8 / seconds / 1e6)
		}
		out[name] = t
	}
	a.last = next
	a.lastTime = now
	return out
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }
