package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcw-xapp/kernel-agent/backend/dryrun"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/payload"
	"github.com/mcw-xapp/kernel-agent/telemetry"
)

func TestProxyAppliesDownlink(t *testing.T) {
	f := newFixture(t, t.TempDir())
	if s := f.state("cpe-0001"); s.Event != payload.EventStarted || s.Role != payload.RoleProxy || s.Direction != payload.DL ||
		s.ProxyID != "proxy-0001" || !strings.Contains(s.LastError, "no WAT address") {
		t.Fatalf("start state = %+v", s)
	}
	f.step(cpeState("cpe-0001", addrs1, up1), cpeState("cpe-0002", addrs2, up2))
	// Safe weights on every WAT with an address.
	want := map[string]payload.Weights{"cpe-0001": {"nr": 1, "wifi": 1, "lifi": 1}, "cpe-0002": {"nr": 1, "wifi": 1}}
	if diff := cmp.Diff(want, f.dl.Last()); diff != "" {
		t.Fatalf("safe weights (-want +got):\n%s", diff)
	}
	f.step(weights("cpe-0001", 5, t0, 30, `{"nr":200,"wifi":50,"lifi":0}`, `{"nr":1}`))
	want["cpe-0001"] = payload.Weights{"nr": 200, "wifi": 50, "lifi": 0}
	if diff := cmp.Diff(want, f.dl.Last()); diff != "" {
		t.Fatalf("dl weights (-want +got):\n%s", diff)
	}
	for _, c := range f.dl.LastPaths() {
		if c.CPEID == "cpe-0001" && c.Paths[0].Addr.String() != "10.31.1.2" {
			t.Fatalf("paths carry the CPE's addresses: %+v", c.Paths)
		}
	}
	s := f.state("cpe-0001")
	if s.Event != payload.EventApplied || s.AppliedVersion != 5 || s.LastError != "" ||
		!cmp.Equal(s.AppliedWeights, want["cpe-0001"]) || s.Capabilities == nil || s.Capabilities.MaxWeight != 255 {
		t.Fatalf("state after update = %+v", s)
	}
	if ps := f.proxyState(); ps.CPEs != 2 || ps.CPEsApplied != 1 || ps.Rules.Used != 5 || !ps.Online || ps.Backend != payload.BackendDryRun {
		t.Fatalf("proxy state = %+v", ps)
	}
}

// TestProxyPerCPERules runs the CPE agent's rules for one CPE and checks
// after every step that the other CPE was not touched.
func TestProxyPerCPERules(t *testing.T) {
	f := newFixture(t, t.TempDir())
	f.step(cpeState("cpe-0001", addrs1, up1), cpeState("cpe-0002", addrs2, up2),
		weights("cpe-0002", 1, t0, 3600, `{"nr":7,"wifi":3}`, `{"nr":1}`),
		weights("cpe-0001", 10, t0, 30, `{"nr":200,"wifi":50}`, `{"nr":1}`))
	other := payload.Weights{"nr": 7, "wifi": 3}
	steps := []struct {
		name    string
		advance time.Duration
		msgs    []Message
		want    payload.Weights // cpe-0001's applied dl weights
		event   string
		errHas  string
		version int64
	}{
		{"replay ignored", 0, []Message{weights("cpe-0001", 10, t0, 30, `{"nr":1}`, `{"nr":1}`)},
			payload.Weights{"nr": 200, "wifi": 50, "lifi": 0}, payload.EventApplied, "", 10},
		{"stale refused", 0, []Message{weights("cpe-0001", 9, t0, 30, `{"nr":1}`, `{"nr":1}`)},
			payload.Weights{"nr": 200, "wifi": 50, "lifi": 0}, payload.EventRejected, "stale", 10},
		{"v1 refused by name", 0, []Message{{Topic: "mcw/v1/cpe/cpe-0001/weights", Data: []byte(
			`{"schema":"mcw.weights.v1","cpe_id":"cpe-0001","version":11,"issued_at_ms":1763800000000,"lease_s":5,"mode":"fixed_split","weights":{"nr":1}}`)}},
			payload.Weights{"nr": 200, "wifi": 50, "lifi": 0}, payload.EventRejected, "mcw.weights.v1 is not accepted", 10},
		{"another CPE's payload on this topic", 0, []Message{onTopic("cpe-0001", weights("cpe-0002", 11, t0, 30, `{"nr":1}`, `{"nr":1}`))},
			payload.Weights{"nr": 200, "wifi": 50, "lifi": 0}, payload.EventRejected, "is not this CPE", 10},
		{"garbage", 0, []Message{{Topic: "mcw/v1/cpe/cpe-0001/weights", Data: []byte(`{"schema":`)}},
			payload.Weights{"nr": 200, "wifi": 50, "lifi": 0}, payload.EventRejected, "invalid payload", 10},
		{"link down masks the WAT", 0, []Message{cpeState("cpe-0001", addrs1, `{"nr":"down","wifi":"up","lifi":"up"}`)},
			payload.Weights{"nr": 0, "wifi": 50, "lifi": 0}, payload.EventLinkDown, "", 10},
		{"the only weighted link down: safe weights of the usable WATs", 0, []Message{cpeState("cpe-0001", addrs1, `{"nr":"down","wifi":"down","lifi":"up"}`)},
			payload.Weights{"nr": 0, "wifi": 0, "lifi": 1}, payload.EventLinkDown, "", 10},
		{"every link down: kept as it was, never all zero", 0, []Message{cpeState("cpe-0001", addrs1, `{"nr":"down","wifi":"down","lifi":"down"}`)},
			payload.Weights{"nr": 0, "wifi": 0, "lifi": 1}, payload.EventLinkDown, "no usable WAT", 10},
		{"links back", 0, []Message{cpeState("cpe-0001", addrs1, up1)},
			payload.Weights{"nr": 200, "wifi": 50, "lifi": 0}, payload.EventLinkUp, "", 10},
		{"address change follows the CPE", 0, []Message{cpeState("cpe-0001", `{"nr":"10.31.1.9","wifi":"10.31.2.2"}`, `{"nr":"up","wifi":"up"}`)},
			payload.Weights{"nr": 200, "wifi": 50}, payload.EventLinkUp, "", 10},
		{"the CPE agent's last will keeps the downlink", 0, []Message{{Topic: "mcw/v1/s/47/cpe/cpe-0001/state", Data: payload.Offline("cpe-0001")}},
			payload.Weights{"nr": 200, "wifi": 50}, payload.EventLinkUp, "", 10},
		{"lease expiry: safe weights", 31 * time.Second, nil,
			payload.Weights{"nr": 1, "wifi": 1}, payload.EventLeaseExpired, "", 0},
		{"expired on arrival: refused, safe weights stay", 0, []Message{weights("cpe-0001", 12, t0, 30, `{"nr":9}`, `{"nr":1}`)},
			payload.Weights{"nr": 1, "wifi": 1}, payload.EventRejected, "lease already expired", 0},
		{"issued in the future: refused", 0, []Message{weights("cpe-0001", 13, t0.Add(time.Minute), 30, `{"nr":9}`, `{"nr":1}`)},
			payload.Weights{"nr": 1, "wifi": 1}, payload.EventRejected, "issued in the future", 0},
		{"fresh update", 0, []Message{weights("cpe-0001", 14, t0.Add(31*time.Second), 30, `{"wifi":9}`, `{"nr":1}`)},
			payload.Weights{"nr": 0, "wifi": 9}, payload.EventApplied, "", 14},
	}
	for _, st := range steps {
		f.clk.t = f.clk.t.Add(st.advance)
		f.step(st.msgs...)
		last := f.dl.Last()
		if diff := cmp.Diff(st.want, last["cpe-0001"]); diff != "" {
			t.Fatalf("%s: cpe-0001 dl (-want +got):\n%s", st.name, diff)
		}
		if st.name != "fresh update" && !cmp.Equal(other, last["cpe-0002"]) {
			t.Fatalf("%s: cpe-0002 changed to %v", st.name, last["cpe-0002"])
		}
		s := f.state("cpe-0001")
		if s.Event != st.event || !strings.Contains(s.LastError, st.errHas) || (st.errHas == "" && s.LastError != "") || s.AppliedVersion != st.version {
			t.Fatalf("%s: state event %q version %d last_error %q, want %q %d %q", st.name, s.Event, s.AppliedVersion, s.LastError, st.event, st.version, st.errHas)
		}
	}
}

func TestProxyRestartRefusesReplay(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir)
	f.step(cpeState("cpe-0001", addrs1, up1), weights("cpe-0001", 7, t0, 60, `{"nr":3}`, `{"nr":1}`))
	f.persisted()

	g := newFixture(t, dir) // restart, lease still running
	if s := g.state("cpe-0001"); s.Event != payload.EventRestored {
		t.Fatalf("after restart: %+v", s)
	}
	g.step(cpeState("cpe-0001", addrs1, up1), weights("cpe-0001", 7, t0, 60, `{"nr":99}`, `{"nr":1}`), weights("cpe-0001", 6, t0, 60, `{"nr":99}`, `{"nr":1}`))
	if got := g.dl.Last()["cpe-0001"]; !cmp.Equal(got, payload.Weights{"nr": 3, "wifi": 0, "lifi": 0}) {
		t.Fatalf("restored weights = %v", got)
	}
	if s := g.state("cpe-0001"); s.Event != payload.EventRejected || !strings.Contains(s.LastError, "stale") || s.AppliedVersion != 7 {
		t.Fatalf("stale after restart: %+v", s)
	}
	// The other CPE had no state: it starts on safe weights.
	if s := g.state("cpe-0002"); s.Event != payload.EventStarted {
		t.Fatalf("cpe-0002: %+v", s)
	}
}

func TestProxyJoinLeave(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, "cpe-0001", "cpe-0002")
	f.step(cpeState("cpe-0001", addrs1, up1), cpeState("cpe-0002", addrs2, up2))
	if n := len(f.dl.Last()); n != 2 {
		t.Fatalf("served set = %v", f.dl.Last())
	}
	// Restart serving cpe-0002 and a new cpe-0003: cpe-0001's retained
	// state is cleared, its directory removed, its rules not applied.
	g := newFixture(t, dir, "cpe-0002", "cpe-0003")
	if b, ok := g.p.out.retained[g.p.pt.CPEState("cpe-0001")]; !ok || len(b) != 0 {
		t.Fatalf("cpe-0001's state not cleared: %q %v", b, ok)
	}
	if _, err := os.Stat(filepath.Join(dir, "cpe", "cpe-0001")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cpe-0001's directory: %v", err)
	}
	g.step(cpeState("cpe-0002", addrs2, up2), cpeState("cpe-0001", addrs1, up1), cpeState("cpe-0003", `{"lifi":"fd00::3"}`, `{"lifi":"up"}`))
	want := map[string]payload.Weights{"cpe-0002": {"nr": 1, "wifi": 1}, "cpe-0003": {"lifi": 1}}
	if diff := cmp.Diff(want, g.dl.Last()); diff != "" {
		t.Fatalf("served set after join/leave (-want +got):\n%s", diff)
	}
}

func TestProxyBackendFailures(t *testing.T) {
	f := newFixture(t, t.TempDir())
	f.step(cpeState("cpe-0001", addrs1, up1), cpeState("cpe-0002", addrs2, up2))

	// Nothing applied: the update is rolled back and may come again.
	f.dl.SetErr(errors.New("kernel says no"))
	f.step(weights("cpe-0001", 3, t0, 30, `{"nr":5}`, `{"nr":1}`))
	if s := f.state("cpe-0001"); s.Event != payload.EventRejected || !strings.Contains(s.LastError, "kernel says no") || s.AppliedVersion != 0 {
		t.Fatalf("after a failed apply: %+v", s)
	}
	if ps := f.proxyState(); !strings.Contains(ps.LastError, "kernel says no") {
		t.Fatalf("proxy state: %+v", ps)
	}
	f.dl.SetErr(nil)
	f.step(weights("cpe-0001", 3, t0, 30, `{"nr":5}`, `{"nr":1}`))
	if got := f.dl.Last()["cpe-0001"]; !cmp.Equal(got, payload.Weights{"nr": 5, "wifi": 0, "lifi": 0}) {
		t.Fatalf("redelivered update: %v", got)
	}

	// One CPE beyond the backend's bound: reported, the other unaffected.
	f.dl.Refuse("cpe-0002", errors.New("tuple bound 4 reached"))
	f.step(weights("cpe-0002", 1, t0, 30, `{"wifi":5}`, `{"nr":1}`))
	if _, ok := f.dl.Last()["cpe-0002"]; ok {
		t.Fatal("refused CPE recorded as applied")
	}
	if s := f.state("cpe-0002"); !strings.Contains(s.LastError, "tuple bound 4 reached") || len(s.AppliedWeights) != 0 || s.AppliedVersion != 0 {
		t.Fatalf("refused CPE state: %+v", s)
	}
	if ps := f.proxyState(); ps.Rules.OverflowCPEs != 1 || ps.CPEsApplied != 1 {
		t.Fatalf("proxy state: %+v", ps)
	}
	f.dl.Refuse("cpe-0002", nil)
	f.step(cpeState("cpe-0002", addrs2, `{"nr":"up","wifi":"down"}`))
	f.step(cpeState("cpe-0002", addrs2, up2))
	if got := f.dl.Last()["cpe-0002"]; !cmp.Equal(got, payload.Weights{"nr": 0, "wifi": 5}) {
		t.Fatalf("once room is back: %v", got)
	}
}

func TestProxyBadCPEState(t *testing.T) {
	f := newFixture(t, t.TempDir())
	f.step(cpeState("cpe-0001", addrs1, up1))
	before := f.dl.Calls()
	for name, data := range map[string]string{
		"other cpe_id":  string(cpeState("cpe-0002", addrs2, up2).Data),
		"proxy role":    strings.Replace(string(cpeState("cpe-0001", addrs2, up2).Data), `"role":"cpe"`, `"role":"proxy"`, 1),
		"bad address":   string(cpeState("cpe-0001", `{"nr":"10.0.0.300"}`, up2).Data),
		"state v1":      strings.Replace(string(cpeState("cpe-0001", addrs2, up2).Data), "mcw.state.v2", "mcw.state.v1", 1),
		"truncated":     `{"schema":"mcw.state.v2"`,
		"unknown WAT":   string(cpeState("cpe-0001", `{"6g":"10.0.0.1"}`, up2).Data),
		"deeply nested": `{"schema":"mcw.state.v2","cpe_id":"cpe-0001","online":true,"links":{"nr":[[[[[]]]]]}}`,
	} {
		f.step(Message{Topic: "mcw/v1/s/47/cpe/cpe-0001/state", Data: []byte(data)})
		if got := f.dl.Last()["cpe-0001"]; !cmp.Equal(got, payload.Weights{"nr": 1, "wifi": 1, "lifi": 1}) {
			t.Fatalf("%s: changed the CPE's downlink to %v", name, got)
		}
	}
	if f.dl.Calls() != before {
		t.Fatalf("ignored states caused %d applies", f.dl.Calls()-before)
	}
	// Topics of no served CPE are ignored.
	f.step(weights("cpe-9999", 1, t0, 30, `{"nr":1}`, `{"nr":1}`), Message{Topic: "mcw/v1/cpe/cpe-0001/other", Data: []byte("x")})
	if f.dl.Calls() != before {
		t.Fatal("foreign topics caused an apply")
	}
}

func TestRoutes(t *testing.T) {
	f := newFixture(t, t.TempDir(), "cpe-0001")
	for topic, want := range map[string]route{
		"mcw/v1/cpe/cpe-0001/weights":    {id: "cpe-0001", kind: "weights"},
		"mcw/v1/s/47/cpe/cpe-0001/state": {id: "cpe-0001", kind: "state"},
		"mcw/v1/cpe/cpe-0001/state":      {id: "cpe-0001", kind: "state", legacy: true},
	} {
		if got, ok := f.p.routes[topic]; !ok || got != want {
			t.Errorf("route of %q = %+v %v", topic, got, ok)
		}
	}
	for _, topic := range []string{"mcw/v1/s/46/cpe/cpe-0001/state", "mcw/v1/cpe/cpe-0001/telemetry",
		"mcw/v1/s/47/cpe/cpe-0001/telemetry", "mcw/v1/proxy/p/state", "mcw/v1/cpe/cpe-0001"} {
		if _, ok := f.p.routes[topic]; ok {
			t.Errorf("%q routed", topic)
		}
	}
	if got := f.p.Subscriptions(); !slices.Equal(got, []string{"mcw/v1/cpe/cpe-0001/weights",
		"mcw/v1/s/47/cpe/cpe-0001/state", "mcw/v1/cpe/cpe-0001/state"}) {
		t.Errorf("Subscriptions() = %v", got)
	}
}

// TestProxyLoopRetriesFailedApply runs the real loop: messages through
// HandleMessage, and after a failed ApplyAll the loop tries again by
// itself once the backend recovers.
func TestProxyLoopRetriesFailedApply(t *testing.T) {
	dl := dryrun.NewDownlink()
	p, err := New(Config{Role: payload.RoleProxy, ProxyID: "proxy-0001", CPEs: []string{"cpe-0001"}, SafeWeights: payload.Weights{"nr": 1},
		StateDir: t.TempDir(), MaxClockSkew: 5 * time.Second},
		Deps{Backend: dl, Metrics: metrics.New(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Second); !ok(); time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (last apply %v)", what, dl.Last())
			}
		}
	}
	m := cpeState("cpe-0001", `{"nr":"10.31.1.2"}`, `{"nr":"up"}`)
	p.HandleMessage(m.Topic, m.Data, time.Now())
	waitFor("safe weights", func() bool { return cmp.Equal(dl.Last()["cpe-0001"], payload.Weights{"nr": 1}) })
	dl.SetErr(errors.New("transient"))
	calls := dl.Calls()
	w := weights("cpe-0001", 1, time.Now(), 30, `{"nr":9}`, `{"nr":1}`)
	p.HandleMessage(w.Topic, w.Data, time.Now())
	waitFor("the failure reported", func() bool {
		s, err := payload.ParseState(p.LastState("cpe-0001"))
		return err == nil && strings.Contains(s.LastError, "transient")
	})
	dl.SetErr(nil)
	waitFor("the retry", func() bool { return dl.Calls() > calls })
	// The update was rolled back; its redelivery applies it.
	p.HandleMessage(w.Topic, w.Data, time.Now())
	waitFor("the redelivered update", func() bool { return cmp.Equal(dl.Last()["cpe-0001"], payload.Weights{"nr": 9}) })
}

// TestProxyTelemetry splits one dump per CPE by the subflows' remote
// address and reports the sender's figures as dl.
func TestProxyTelemetry(t *testing.T) {
	src := &subflows{}
	clk := &clock{t: t0}
	p, err := New(Config{Role: payload.RoleProxy, ProxyID: "proxy-0001", CPEs: []string{"cpe-0001", "cpe-0002"}, SafeWeights: payload.Weights{"nr": 1},
		StateDir: t.TempDir(), TelemetryInterval: time.Second, MPTCPOnly: true},
		Deps{Backend: dryrun.NewDownlink(), Subflows: src, Metrics: metrics.New(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.handle(cpeState("cpe-0001", addrs1, up1))
	p.handle(cpeState("cpe-0002", addrs2, up2))
	proxyAddr := netip.MustParseAddr("10.31.0.1")
	sf := func(dst string, cookie, acked uint64) telemetry.Subflow {
		return telemetry.Subflow{Src: proxyAddr, Dst: netip.MustParseAddr(dst), Cookie: cookie, BytesAcked: acked, MPTCP: true, Cwnd: 10, RTTMicros: 5000}
	}
	aggs := map[string]*telemetry.Aggregator{}
	src.list = []telemetry.Subflow{sf("10.31.1.2", 1, 0), sf("10.32.2.2", 2, 0)}
	p.sampleTelemetry(aggs)
	clk.t = clk.t.Add(time.Second)
	src.list = []telemetry.Subflow{sf("10.31.1.2", 1, 2_500_000), sf("10.32.2.2", 2, 125_000), sf("192.0.2.9", 3, 9_999_999)}
	p.sampleTelemetry(aggs)
	_, pending := p.out.q.take()
	for cpeID, want := range map[string][2]any{"cpe-0001": {"nr", 20.0}, "cpe-0002": {"wifi", 1.0}} {
		b := pending[p.pt.CPETelemetry(cpeID)]
		tm, err := payload.ParseTelemetry(b.data)
		if err != nil || b.retained {
			t.Fatalf("%s: %v (retained %v)\n%s", cpeID, err, b.retained, b.data)
		}
		w := tm.WATs[want[0].(string)]
		if tm.ProxyID != "proxy-0001" || tm.CPEID != cpeID || w.UL != nil || w.DL == nil || w.DL.DeliveredMbps != want[1].(float64) || w.Subflows != 1 {
			t.Errorf("%s: %+v, %s = %+v dl %+v", cpeID, tm, want[0], w, w.DL)
		}
	}
}

// TestProxySharesCapsReachTheDownlink: the dl set's caps_mbps go with its
// weights to the downlink (the weight-0 WAT's too: the backend ignores
// it), and the safe weights after a lease expiry carry none.
func TestProxySharesCapsReachTheDownlink(t *testing.T) {
	f := newFixture(t, t.TempDir())
	f.step(cpeState("cpe-0001", addrs1, up1))
	m := weights("cpe-0001", 6, t0, 30, `{"nr":7,"wifi":3,"lifi":0},"caps_mbps":{"nr":14,"wifi":6}`, `{"nr":1}`)
	f.step(m)
	capsOf := func() map[string]float64 {
		for _, c := range f.dl.LastPaths() {
			if c.CPEID == "cpe-0001" {
				out := map[string]float64{}
				for _, p := range c.Paths {
					out[p.WAT] = p.CapMbps
				}
				return out
			}
		}
		return nil
	}
	if diff := cmp.Diff(map[string]float64{"nr": 14, "wifi": 6, "lifi": 0}, capsOf()); diff != "" {
		t.Fatalf("caps handed to the downlink (-want +got):\n%s", diff)
	}
	if s := f.state("cpe-0001"); s.Event != payload.EventApplied || s.AppliedVersion != 6 {
		t.Fatalf("state %+v", s)
	}
	f.clk.t = t0.Add(31 * time.Second)
	f.step()
	if diff := cmp.Diff(map[string]float64{"nr": 0, "wifi": 0, "lifi": 0}, capsOf()); diff != "" {
		t.Fatalf("safe weights carry caps (-want +got):\n%s", diff)
	}
}

// TestProxyAddressClaims: a CPE that claims another's WAT address used to
// get the victim's downlink rule for itself (the lower id won); now two
// claims of one address get neither CPE steered, an alarm in both states
// and a metric, until the claims differ again.
func TestProxyAddressClaims(t *testing.T) {
	f := newFixture(t, t.TempDir())
	f.step(cpeState("cpe-0001", addrs1, up1), cpeState("cpe-0002", addrs2, up2),
		weights("cpe-0001", 5, t0, 60, `{"nr":1,"wifi":200,"lifi":0}`, `{"nr":1}`),
		weights("cpe-0002", 5, t0, 60, `{"nr":1,"wifi":0}`, `{"nr":1}`))
	if got := f.dl.Last()["cpe-0001"]; !cmp.Equal(got, payload.Weights{"nr": 1, "wifi": 200, "lifi": 0}) {
		t.Fatalf("before: %v", got)
	}
	// cpe-0002 retains cpe-0001's Wi-Fi address as its own.
	f.step(cpeState("cpe-0002", `{"nr":"10.32.1.2","wifi":"10.31.2.2"}`, up2))
	if got := f.dl.Last(); len(got) != 0 {
		t.Fatalf("a claimed address is still steered: %v", got)
	}
	for _, id := range []string{"cpe-0001", "cpe-0002"} {
		s := f.state(id)
		if s.Alarm != payload.AlarmAddressConflict || s.Event != payload.EventRejected || len(s.AppliedWeights) != 0 ||
			!strings.Contains(s.LastError, "10.31.2.2 also claimed by") {
			t.Fatalf("%s during the conflict: %+v", id, s)
		}
	}
	if got := metrics.Value(f.m.ProxyCPEs.WithLabelValues("address_conflict")); got != 2 {
		t.Fatalf("proxy_cpes{state=address_conflict} = %v", got)
	}
	// The claim withdrawn: both are steered again and the alarm clears.
	f.step(cpeState("cpe-0002", addrs2, up2))
	want := map[string]payload.Weights{"cpe-0001": {"nr": 1, "wifi": 200, "lifi": 0}, "cpe-0002": {"nr": 1, "wifi": 0}}
	if diff := cmp.Diff(want, f.dl.Last()); diff != "" {
		t.Fatalf("after the conflict (-want +got):\n%s", diff)
	}
	if s := f.state("cpe-0001"); s.Alarm != "" || s.Event != payload.EventApplied || s.LastError != "" {
		t.Fatalf("cpe-0001 after the conflict: %+v", s)
	}
	if got := metrics.Value(f.m.ProxyCPEs.WithLabelValues("address_conflict")); got != 0 {
		t.Fatalf("proxy_cpes{state=address_conflict} after = %v", got)
	}
}

// TestProxyRefusesWildcardClaims: a claim that would match traffic of
// others (the WRR kernel's wildcard 0.0.0.0 at the head of the list, an
// IPv4-mapped spelling of a victim's address, ...) is refused with the
// whole state; nothing reaches the kernel.
func TestProxyRefusesWildcardClaims(t *testing.T) {
	f := newFixture(t, t.TempDir())
	f.step(cpeState("cpe-0001", addrs1, up1), cpeState("cpe-0002", addrs2, up2))
	before, calls := f.dl.Last(), f.dl.Calls()
	for _, a := range []string{"0.0.0.0", "::", "::ffff:10.31.2.2", "127.0.0.1", "::1", "224.0.0.1", "ff02::1", "255.255.255.255", "fe80::1%eth0"} {
		f.step(cpeState("cpe-0002", fmt.Sprintf(`{"nr":"10.32.1.2","wifi":%q}`, a), up2))
		if diff := cmp.Diff(before, f.dl.Last()); diff != "" || f.dl.Calls() != calls {
			t.Fatalf("claim of %s changed the downlink (-want +got):\n%s", a, diff)
		}
	}
	if got := metrics.Value(f.m.ProxyStates.WithLabelValues("invalid")); got != 9 {
		t.Fatalf("proxy_cpe_states{result=invalid} = %v", got)
	}
}

// TestProxyVersionPoisoning: the proxy follows the same rule as the CPE
// agent (package lease): an expired update far ahead changes nothing, not
// even the lease; a valid one far ahead in versions does not make the
// xApp's next update stale; nor does an xApp restarted with versions from 1.
func TestProxyVersionPoisoning(t *testing.T) {
	f := newFixture(t, t.TempDir())
	dl := `{"nr":3,"wifi":7,"lifi":0}`
	f.step(cpeState("cpe-0001", addrs1, up1), weights("cpe-0001", 5, t0.Add(-50*time.Minute), 3600, dl, `{"nr":1}`))
	steps := []struct {
		name        string
		msg         Message
		wantVersion int64
	}{
		{"expired, far ahead", weights("cpe-0001", 1<<40, t0.Add(-40*time.Minute), 60, `{"nr":9}`, `{"nr":1}`), 5},
		{"far ahead, valid", weights("cpe-0001", 1<<32, t0.Add(-3*time.Second), 60, dl, `{"nr":1}`), 1 << 32},
		{"the xApp's next", weights("cpe-0001", 6, t0.Add(-2*time.Second), 60, dl, `{"nr":1}`), 6},
		{"xApp restarted, empty store", weights("cpe-0001", 1, t0.Add(-time.Second), 60, dl, `{"nr":1}`), 1},
	}
	for _, st := range steps {
		f.step(st.msg)
		s := f.state("cpe-0001")
		if s.AppliedVersion != st.wantVersion || !cmp.Equal(s.AppliedWeights, payload.Weights{"nr": 3, "wifi": 7, "lifi": 0}) {
			t.Fatalf("%s: %+v", st.name, s)
		}
	}
	if got := metrics.Value(f.m.Updates.WithLabelValues("expired")); got != 1 {
		t.Fatalf("updates{result=expired} = %v", got)
	}
}

// TestProxyEmptyRetainedWeights: an empty retained weights message means no
// weights, as in the CPE role: the lease ends and the safe weights stand.
// It used to be ignored, the cleared weights staying in force.
func TestProxyEmptyRetainedWeights(t *testing.T) {
	f := newFixture(t, t.TempDir())
	f.step(cpeState("cpe-0001", addrs1, up1), weights("cpe-0001", 5, t0, 60, `{"nr":3,"wifi":7,"lifi":0}`, `{"nr":1}`))
	f.step(Message{Topic: "mcw/v1/cpe/cpe-0001/weights", At: t0})
	if got := f.dl.Last()["cpe-0001"]; !cmp.Equal(got, payload.Weights{"nr": 1, "wifi": 1, "lifi": 1}) {
		t.Fatalf("after the weights were cleared: %v", got)
	}
	if s := f.state("cpe-0001"); s.Event != payload.EventLeaseExpired || s.AppliedVersion != 0 {
		t.Fatalf("state: %+v", s)
	}
	if got := metrics.Value(f.m.Updates.WithLabelValues("cleared")); got != 1 {
		t.Fatalf("updates{result=cleared} = %v", got)
	}
}

// TestProxyRegistry: with the operator's registry (config cpe_prefixes) a
// CPE's claim alone never decides: an address outside the CPE's registered
// prefixes (here another CPE's, not served by this proxy, so no conflict
// could catch it) is refused with the whole state.
func TestProxyRegistry(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{t: t0}
	dl := dryrun.NewDownlink()
	m := metrics.New()
	p, err := New(Config{Role: payload.RoleProxy, ProxyID: "proxy-0001", CPEs: []string{"cpe-0001"}, SafeWeights: payload.Weights{"nr": 1, "wifi": 1},
		StateDir: dir, MaxClockSkew: 5 * time.Second,
		Prefixes: map[string][]netip.Prefix{"cpe-0001": {netip.MustParsePrefix("10.31.0.0/16")}}},
		Deps{Backend: dl, Metrics: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, p: p, dl: dl, clk: clk, dir: dir, m: m}
	f.step(cpeState("cpe-0001", `{"nr":"10.31.1.2","wifi":"10.31.2.2"}`, up2))
	if got := f.dl.Last()["cpe-0001"]; !cmp.Equal(got, payload.Weights{"nr": 1, "wifi": 1}) {
		t.Fatalf("registered addresses: %v", got)
	}
	calls := f.dl.Calls()
	f.step(cpeState("cpe-0001", `{"nr":"10.31.1.2","wifi":"10.77.2.2"}`, up2))
	if f.dl.Calls() != calls || metrics.Value(m.ProxyStates.WithLabelValues("invalid")) != 1 {
		t.Fatalf("an unregistered address was taken: %d applies, invalid %v", f.dl.Calls()-calls, metrics.Value(m.ProxyStates.WithLabelValues("invalid")))
	}
	for _, c := range f.dl.LastPaths() {
		for _, ps := range c.Paths {
			if ps.Addr.String() == "10.77.2.2" {
				t.Fatalf("unregistered address in the kernel set: %+v", c)
			}
		}
	}
}

// TestProxyRegistryOverlap: a claim that lies in two CPEs' registered
// prefixes is refused, whoever makes it (issue 33: with cpe-0001:
// 10.0.0.0/8 beside cpe-0002: 10.20.0.0/16 and cpe-0002 not yet
// reported, cpe-0001's state steered 10.20.0.2; with both reported, the
// conflict check let cpe-0001 switch cpe-0002's steering off). The
// configuration refuses such a registry; this is the proxy's own guard.
func TestProxyRegistryOverlap(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{t: t0}
	dl := dryrun.NewDownlink()
	m := metrics.New()
	p, err := New(Config{Role: payload.RoleProxy, ProxyID: "proxy-0001", CPEs: []string{"cpe-0001", "cpe-0002"}, SafeWeights: payload.Weights{"nr": 1, "wifi": 1},
		StateDir: dir, MaxClockSkew: 5 * time.Second,
		Prefixes: map[string][]netip.Prefix{
			"cpe-0001": {netip.MustParsePrefix("10.0.0.0/8")},
			"cpe-0002": {netip.MustParsePrefix("10.20.0.0/16")},
		}},
		Deps{Backend: dl, Metrics: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, p: p, dl: dl, clk: clk, dir: dir, m: m}
	steered := func(addr string) []string {
		var by []string
		for _, c := range f.dl.LastPaths() {
			for _, ps := range c.Paths {
				if ps.Addr.String() == addr {
					by = append(by, c.CPEID)
				}
			}
		}
		return by
	}
	// The victim has not reported: cpe-0001 claims its address.
	f.step(cpeState("cpe-0001", `{"nr":"10.1.0.2","wifi":"10.20.0.2"}`, up2),
		weights("cpe-0001", 5, t0, 60, `{"nr":1,"wifi":200}`, `{"nr":1}`))
	if by := steered("10.20.0.2"); len(by) != 0 {
		t.Fatalf("10.20.0.2 steered for %v", by)
	}
	if got := metrics.Value(m.ProxyStates.WithLabelValues("invalid")); got != 1 {
		t.Fatalf("proxy_cpe_states{result=invalid} = %v", got)
	}
	// Outside the overlap cpe-0001 is steered as before.
	f.step(cpeState("cpe-0001", `{"nr":"10.1.0.2","wifi":"10.2.0.2"}`, up2))
	if got := f.dl.Last()["cpe-0001"]; !cmp.Equal(got, payload.Weights{"nr": 1, "wifi": 200}) {
		t.Fatalf("cpe-0001 outside the overlap: %v", got)
	}
	// Within the overlap neither CPE's claim is taken: the registry cannot
	// say whose the address is, so no claim to it can switch the other
	// CPE's steering off either.
	f.step(cpeState("cpe-0002", `{"nr":"10.20.0.2"}`, `{"nr":"up"}`))
	if got := metrics.Value(m.ProxyStates.WithLabelValues("invalid")); got != 2 {
		t.Fatalf("proxy_cpe_states{result=invalid} = %v", got)
	}
	if by := steered("10.20.0.2"); len(by) != 0 {
		t.Fatalf("10.20.0.2 steered for %v", by)
	}
}
