package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/mqttclient"
	"github.com/mcw-xapp/kernel-agent/payload"
	"github.com/mcw-xapp/kernel-agent/telemetry"
)

func TestWATLimits(t *testing.T) {
	paths := func(nr, wifi int) []backend.Path {
		return []backend.Path{{WAT: "nr", Weight: nr}, {WAT: "wifi", Weight: wifi}}
	}
	for _, tc := range []struct {
		name    string
		applied backend.Device
		caps    map[string]float64
		want    map[string]ownLimit
	}{{
		name:    "a cap at the link rate holds the WAT where its link would: not reported",
		applied: backend.Device{Paths: paths(3, 1)},
		caps:    map[string]float64{"nr": 16, "wifi": 12},
		want:    map[string]ownLimit{"wifi": {capMbps: 12}},
	}, {
		name:    "no classes: the WATs' caps",
		applied: backend.Device{Paths: paths(3, 1)},
		caps:    map[string]float64{"nr": 12},
		want:    map[string]ownLimit{"nr": {capMbps: 12}},
	}, {
		name:    "nothing capped",
		applied: backend.Device{Paths: paths(3, 1)},
	}, {
		name:    "weight 0 without classes: backup, not floored",
		applied: backend.Device{Paths: paths(0, 1)},
	}, {
		name: "a WAT's own cap bounds its classes",
		applied: backend.Device{Paths: paths(3, 1), Classes: []backend.Class{
			{Name: "bulk", Weights: payload.Weights{"nr": 1, "wifi": 1}}}},
		caps: map[string]float64{"nr": 12},
		want: map[string]ownLimit{"nr": {capMbps: 12}},
	}, {
		name: "default rule off a WAT a class uses: floored",
		applied: backend.Device{Paths: paths(0, 1), Classes: []backend.Class{
			{Name: "control", Urgent: true, Weights: payload.Weights{"nr": 1, "wifi": 0}},
			{Name: "bulk", Weights: payload.Weights{"nr": 0, "wifi": 1}}}},
		want: map[string]ownLimit{"nr": {floored: true}},
	}, {
		name: "default rule off a WAT no class uses: not floored",
		applied: backend.Device{Paths: paths(0, 1), Classes: []backend.Class{
			{Name: "bulk", Weights: payload.Weights{"nr": 0, "wifi": 1}}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, watLimits(tc.applied, tc.caps, map[string]float64{"nr": 16, "wifi": 40}), cmp.AllowUnexported(ownLimit{})); diff != "" {
				t.Errorf("limits (-want +got):\n%s", diff)
			}
		})
	}
}

// capsBackend is a rate-caps backend that reports as applied the caps it
// was handed.
type capsBackend struct{ classBackend }

func (b *capsBackend) AppliedCaps(cpeID string) map[string]float64 {
	out := map[string]float64{}
	for _, p := range b.last(cpeID).Paths {
		if p.Weight > 0 && p.CapMbps > 0 {
			out[p.WAT] = p.CapMbps
		}
	}
	return out
}

// TestOwnCapCensorsTelemetry: once the agent capped nr at 10 Mbit/s, nr's
// subflow delivering 9.4 Mbit/s with a standing queue (the agent's own
// HTB) reports saturated 0, while wifi's, uncapped, reports 1; the cap
// reaches the sampler from the loop without the sampler asking the
// backend.
func TestOwnCapCensorsTelemetry(t *testing.T) {
	src := &subflows{}
	clk := &clock{t: t0}
	a, err := New(Config{CPEID: "cpe-0001", WATs: map[string]string{"nr": "nr0", "wifi": "wlan0"},
		SafeWeights: payload.Weights{"nr": 1, "wifi": 1}, StateDir: t.TempDir(), TelemetryInterval: time.Second,
		MPTCPOnly: true, MaxClockSkew: 5 * time.Second},
		Deps{Backend: &capsBackend{}, Links: newFakeLinks(), Subflows: src, Metrics: metrics.New(),
			Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.Process(context.Background(), Message{Topic: mqttclient.TopicsFor("cpe-0001", mqttclient.DefaultShards).Weights, At: t0,
		Data: []byte(fmt.Sprintf(`{"schema":"mcw.weights.v2","cpe_id":"cpe-0001","version":3,"issued_at_ms":%d,"lease_s":60,`+
			`"dl":{"mode":"load_balancing","weights":{"nr":1}},`+
			`"ul":{"mode":"load_balancing","weights":{"nr":1,"wifi":1},"caps_mbps":{"nr":10}}}`, t0.UnixMilli()))})
	sf := func(addr string, cookie, acked uint64) telemetry.Subflow {
		return telemetry.Subflow{Src: netip.MustParseAddr(addr), Cookie: cookie, MPTCP: true, Cwnd: 10, SndMSS: 1000,
			RTTMicros: 100_000, NotsentBytes: 5000, HasChrono: true, BusyMicros: acked, BytesAcked: acked}
	}
	aggs := map[string]*telemetry.Aggregator{}
	src.list = []telemetry.Subflow{sf("10.31.1.1", 1, 0), sf("10.31.2.1", 2, 0)}
	a.sampleTelemetry(aggs)
	clk.t = clk.t.Add(time.Second)
	src.list = []telemetry.Subflow{sf("10.31.1.1", 1, 1_175_000), sf("10.31.2.1", 2, 1_250_000)}
	a.sampleTelemetry(aggs)
	_, pending := a.out.q.take()
	tm, err := payload.ParseTelemetry(pending["mcw/v1/s/47/cpe/cpe-0001/telemetry"].data)
	if err != nil {
		t.Fatal(err)
	}
	for w, want := range map[string]float64{"nr": 0, "wifi": 1} {
		if ul := tm.WATs[w].UL; ul == nil || ul.Saturated == nil || *ul.Saturated != want {
			t.Errorf("%s: ul %+v, want saturated %v", w, ul, want)
		}
	}
}
