package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/dryrun"
	"github.com/mcw-xapp/kernel-agent/linkwatch"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/mqttclient"
	"github.com/mcw-xapp/kernel-agent/payload"
	"github.com/mcw-xapp/kernel-agent/state"
	"github.com/mcw-xapp/kernel-agent/telemetry"
)

// fakeLinks is a LinkSource driven by the test.
type fakeLinks struct {
	initial map[string]linkwatch.Status
	ch      chan linkwatch.Status
}

func newFakeLinks() *fakeLinks {
	return &fakeLinks{
		initial: map[string]linkwatch.Status{
			"nr0":   {Interface: "nr0", Index: 2, LinkUp: true, Addr: netip.MustParseAddr("10.31.1.1")},
			"wlan0": {Interface: "wlan0", Index: 3, LinkUp: true, Addr: netip.MustParseAddr("10.31.2.1")},
		},
		ch: make(chan linkwatch.Status, 8),
	}
}

func (f *fakeLinks) Start(context.Context) (map[string]linkwatch.Status, error) {
	return f.initial, nil
}

func (f *fakeLinks) Run(ctx context.Context, out chan<- linkwatch.Status, beat func()) error {
	for {
		beat()
		select {
		case <-ctx.Done():
			return nil
		case s := <-f.ch:
			out <- s
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// HandleWeights queues a payload on the CPE role's weights topic.
func (a *Agent) HandleWeights(data []byte, at time.Time) {
	a.HandleMessage(mqttclient.TopicsFor(a.cfg.CPEID, a.cfg.Shards).Weights, data, at)
}

// recorder is a Publisher that keeps every state payload.
type recorder struct {
	mu     sync.Mutex
	states []payload.State
	telem  int
}

func (r *recorder) PublishRetained(_ context.Context, topic string, b []byte) error {
	if topic == "mcw/v1/cpe/cpe-0001/state" && len(b) == 0 {
		return nil // the legacy topic's retained state cleared
	}
	if topic != "mcw/v1/s/47/cpe/cpe-0001/state" {
		return fmt.Errorf("state on %s", topic)
	}
	s, err := payload.ParseState(b)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.states = append(r.states, s)
	r.mu.Unlock()
	return nil
}

func (r *recorder) PublishQoS0(context.Context, string, []byte) error {
	r.mu.Lock()
	r.telem++
	r.mu.Unlock()
	return nil
}

// waitEvent waits for a state with event ev and returns it.
func (r *recorder) waitEvent(t *testing.T, ev string, from int) (payload.State, int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		for i := from; i < len(r.states); i++ {
			if r.states[i].Event == ev {
				s := r.states[i]
				r.mu.Unlock()
				return s, i + 1
			}
		}
		r.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("no state with event %q", ev)
	return payload.State{}, 0
}

// weightsMsg is an update issued now.
func weightsMsg(version int64, lease float64, w string) []byte {
	return weightsMsgAt(version, time.Now(), lease, w)
}

func weightsMsgAt(version int64, issued time.Time, lease float64, w string) []byte {
	// The dl set names a WAT this CPE does not have: were it applied
	// instead of ul, the update would be refused as all zero.
	return []byte(fmt.Sprintf(`{"schema":"mcw.weights.v2","cpe_id":"cpe-0001","version":%d,"issued_at_ms":%d,`+
		`"lease_s":%g,"dl":{"mode":"fixed_split","weights":{"lte":9}},"ul":{"mode":"load_balancing","reason":"test","weights":%s}}`,
		version, issued.UnixMilli(), lease, w))
}

type harness struct {
	agent *Agent
	be    *dryrun.Backend
	links *fakeLinks
	pub   *recorder
	store *state.Store
	stop  func()
}

func start(t *testing.T, dir string) *harness {
	t.Helper()
	store, err := state.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{be: dryrun.New(), links: newFakeLinks(), pub: &recorder{}, store: store}
	a, err := New(Config{
		CPEID:        "cpe-0001",
		WATs:         map[string]string{"nr": "nr0", "wifi": "wlan0"},
		SafeWeights:  payload.Weights{"nr": 1, "wifi": 1},
		MaxClockSkew: 2 * time.Second,
		StateDir:     dir,
	}, Deps{Backend: backend.Own(h.be), Links: h.links, Metrics: metrics.New(),
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h.agent = a
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, h.pub) }()
	h.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			h.stop()
		}
	})
	return h
}

func TestAgentLifecycle(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir)
	s, n := h.pub.waitEvent(t, payload.EventStarted, 0)
	if diff := cmp.Diff(payload.Weights{"nr": 1, "wifi": 1}, s.AppliedWeights); diff != "" || s.AppliedVersion != 0 {
		t.Fatalf("started: version %d weights (-want +got):\n%s", s.AppliedVersion, diff)
	}

	t0 := time.Now()
	v7 := weightsMsgAt(7, t0.Add(time.Millisecond), 60, `{"nr":0,"wifi":3}`)
	steps := []struct {
		name        string
		msg         []byte
		wantEvent   string
		wantVersion int64
		wantWeights payload.Weights
	}{
		{"valid update", weightsMsgAt(5, t0, 60, `{"nr":30,"wifi":100,"lifi":7}`), payload.EventApplied, 5, payload.Weights{"nr": 30, "wifi": 100}},
		{"stale version", weightsMsgAt(4, t0.Add(-time.Millisecond), 60, `{"nr":1,"wifi":1}`), payload.EventRejected, 5, payload.Weights{"nr": 30, "wifi": 100}},
		{"all zero", weightsMsg(6, 60, `{"nr":0,"wifi":0}`), payload.EventRejected, 5, payload.Weights{"nr": 30, "wifi": 100}},
		{"out of range", weightsMsg(6, 60, `{"nr":256}`), payload.EventRejected, 5, payload.Weights{"nr": 30, "wifi": 100}},
		{"only an unconfigured WAT", weightsMsg(6, 60, `{"lifi":9}`), payload.EventRejected, 5, payload.Weights{"nr": 30, "wifi": 100}},
		{"other CPE", []byte(`{"schema":"mcw.weights.v2","cpe_id":"cpe-0002","version":9,"issued_at_ms":1763800000000,"lease_s":5,"dl":{"mode":"fixed_split","weights":{"nr":1}},"ul":{"mode":"fixed_split","weights":{"nr":1}}}`), payload.EventRejected, 5, payload.Weights{"nr": 30, "wifi": 100}},
		{"newer version", v7, payload.EventApplied, 7, payload.Weights{"nr": 0, "wifi": 3}},
	}
	for _, st := range steps {
		h.agent.HandleWeights(st.msg, time.Now())
		s, n = h.pub.waitEvent(t, st.wantEvent, n)
		if s.AppliedVersion != st.wantVersion {
			t.Errorf("%s: applied_version %d, want %d", st.name, s.AppliedVersion, st.wantVersion)
		}
		if diff := cmp.Diff(st.wantWeights, s.AppliedWeights); diff != "" {
			t.Errorf("%s: weights (-want +got):\n%s", st.name, diff)
		}
		if (st.wantEvent == payload.EventRejected) != (s.LastError != "") {
			t.Errorf("%s: last_error %q", st.name, s.LastError)
		}
		if diff := cmp.Diff(st.wantWeights, h.be.Last()); diff != "" {
			t.Errorf("%s: kernel (-want +got):\n%s", st.name, diff)
		}
	}

	// A replay of the newest version is ignored silently.
	applies := len(h.be.Applied())
	h.agent.HandleWeights(v7, time.Now())
	h.agent.HandleWeights(weightsMsg(8, 60, `{"nr":2,"wifi":3}`), time.Now())
	s, n = h.pub.waitEvent(t, payload.EventApplied, n)
	if s.AppliedVersion != 8 || len(h.be.Applied()) != applies+1 {
		t.Fatalf("replay was not ignored: version %d, %d applies", s.AppliedVersion, len(h.be.Applied())-applies)
	}

	// Link down masks the WAT; link up restores it.
	h.links.ch <- linkwatch.Status{Interface: "nr0", Index: 2, LinkUp: false, Addr: netip.MustParseAddr("10.31.1.1")}
	s, n = h.pub.waitEvent(t, payload.EventLinkDown, n)
	if diff := cmp.Diff(payload.Weights{"nr": 0, "wifi": 3}, s.AppliedWeights); diff != "" || s.Links["nr"] != "down" {
		t.Fatalf("link down: links %v, weights (-want +got):\n%s", s.Links, diff)
	}
	// With nr down, an update giving all to nr falls back to safe weights
	// of the usable WATs.
	h.agent.HandleWeights(weightsMsg(9, 60, `{"nr":5,"wifi":0}`), time.Now())
	s, n = h.pub.waitEvent(t, payload.EventApplied, n)
	if diff := cmp.Diff(payload.Weights{"nr": 0, "wifi": 1}, s.AppliedWeights); diff != "" {
		t.Fatalf("standby takeover (-want +got):\n%s", diff)
	}
	h.links.ch <- linkwatch.Status{Interface: "nr0", Index: 2, LinkUp: true, Addr: netip.MustParseAddr("10.31.1.1")}
	s, n = h.pub.waitEvent(t, payload.EventLinkUp, n)
	if diff := cmp.Diff(payload.Weights{"nr": 5, "wifi": 0}, s.AppliedWeights); diff != "" || s.Links["nr"] != "up" {
		t.Fatalf("link up (-want +got):\n%s", diff)
	}
	// The state says whose it is and where the proxy finds the CPE's WATs;
	// a new address alone is reported, so the proxy follows it.
	if s.Role != payload.RoleCPE || s.Direction != payload.UL || s.Addresses["nr"] != "10.31.1.1" {
		t.Fatalf("state role %q direction %q addresses %v", s.Role, s.Direction, s.Addresses)
	}
	h.links.ch <- linkwatch.Status{Interface: "nr0", Index: 2, LinkUp: true, Addr: netip.MustParseAddr("10.31.1.77")}
	s, _ = h.pub.waitEvent(t, payload.EventLinkUp, n)
	if s.Addresses["nr"] != "10.31.1.77" || s.AppliedWeights["nr"] != 5 {
		t.Fatalf("address change: %+v", s)
	}

	// Restart: the lease still runs, so the weights come back; the saved
	// mark blocks an older update.
	h.stop()
	h2 := start(t, dir)
	s, n = h2.pub.waitEvent(t, payload.EventRestored, 0)
	if s.AppliedVersion != 9 || s.AppliedWeights["nr"] != 5 {
		t.Fatalf("restored: %+v", s)
	}
	h2.agent.HandleWeights(weightsMsgAt(8, t0.Add(-time.Second), 60, `{"nr":1,"wifi":1}`), time.Now())
	if s, _ = h2.pub.waitEvent(t, payload.EventRejected, n); s.AppliedVersion != 9 {
		t.Fatalf("stale after restart: %+v", s)
	}
}

func TestLeaseExpiry(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir)
	_, n := h.pub.waitEvent(t, payload.EventStarted, 0)
	// The message carries its issue time in milliseconds, so the lease
	// ends a second after t0 truncated to them (unrounded, the expiry came
	// 999.9 ms after t0 in one run).
	t0 := time.Now().Truncate(time.Millisecond)
	v3 := weightsMsgAt(3, t0, 1, `{"nr":0,"wifi":9}`)
	h.agent.HandleWeights(v3, t0)
	_, n = h.pub.waitEvent(t, payload.EventApplied, n)
	s, _ := h.pub.waitEvent(t, payload.EventLeaseExpired, n)
	if el := time.Since(t0); el < time.Second || el > 2*time.Second {
		t.Errorf("lease expired after %v, want about 1 s", el)
	}
	if diff := cmp.Diff(payload.Weights{"nr": 1, "wifi": 1}, s.AppliedWeights); diff != "" || s.AppliedVersion != 0 {
		t.Fatalf("after expiry: version %d (-want +got):\n%s", s.AppliedVersion, diff)
	}
	deadline := time.Now().Add(2 * time.Second) // the persister runs beside the loop
	for {
		rec, ok, err := h.store.Load()
		if ok && err == nil && rec.Version == 3 && rec.Weights == nil && rec.LeaseUntilMs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("persisted after expiry: %+v %v %v", rec, ok, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The expired update cannot be replayed, nor an older one applied.
	h.agent.HandleWeights(v3, time.Now())
	h.agent.HandleWeights(weightsMsgAt(2, t0.Add(-time.Millisecond), 1, `{"nr":0,"wifi":9}`), time.Now())
	if s, _ := h.pub.waitEvent(t, payload.EventRejected, n); s.AppliedWeights["nr"] != 1 {
		t.Fatalf("replay after expiry applied: %+v", s)
	}
}

func TestApplyFailureReported(t *testing.T) {
	h := start(t, t.TempDir())
	_, n := h.pub.waitEvent(t, payload.EventStarted, 0)
	h.be.SetErr(errors.New("kernel says no"))
	h.agent.HandleWeights(weightsMsg(3, 60, `{"nr":4,"wifi":9}`), time.Now())
	s, _ := h.pub.waitEvent(t, payload.EventRejected, n)
	if s.LastError != "kernel says no" || s.AppliedVersion != 0 {
		t.Fatalf("apply failure: %+v", s)
	}
}

// TestSharesCapsReachTheBackend: the ul set's caps_mbps go to the backend with
// their weights, are persisted with them, and are not carried over to the
// safe weights when the lease runs out.
func TestSharesCapsReachTheBackend(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir)
	_, n := h.pub.waitEvent(t, payload.EventStarted, 0)
	msg := []byte(fmt.Sprintf(`{"schema":"mcw.weights.v2","cpe_id":"cpe-0001","version":5,"issued_at_ms":%d,`+
		`"lease_s":1,"dl":{"mode":"fixed_split","weights":{"lte":9}},`+
		`"ul":{"mode":"fixed_split","weights":{"nr":7,"wifi":3},"caps_mbps":{"nr":14,"wifi":6}}}`, time.Now().UnixMilli()))
	h.agent.HandleWeights(msg, time.Now())
	_, n = h.pub.waitEvent(t, payload.EventApplied, n)
	capsOf := func(ps []backend.Path) map[string]float64 {
		out := map[string]float64{}
		for _, p := range ps {
			out[p.WAT] = p.CapMbps
		}
		return out
	}
	all := h.be.Applied()
	if diff := cmp.Diff(map[string]float64{"nr": 14, "wifi": 6}, capsOf(all[len(all)-1])); diff != "" {
		t.Fatalf("caps handed to the backend (-want +got):\n%s", diff)
	}
	rec, ok, err := h.store.Load()
	for deadline := time.Now().Add(2 * time.Second); (!ok || rec.Version != 5) && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		rec, ok, err = h.store.Load()
	}
	if err != nil || !ok || rec.CapsMbps["nr"] != 14 || rec.CapsMbps["wifi"] != 6 {
		t.Fatalf("persisted record %+v (%v, %v), want the caps with the weights", rec, ok, err)
	}
	h.pub.waitEvent(t, payload.EventLeaseExpired, n)
	all = h.be.Applied()
	if diff := cmp.Diff(map[string]float64{"nr": 0, "wifi": 0}, capsOf(all[len(all)-1])); diff != "" {
		t.Fatalf("safe weights carry caps (-want +got):\n%s", diff)
	}
}

// TestCPETelemetry: in role cpe the one dump is matched by the subflows'
// local address (each WAT interface's), published on the CPE's own
// telemetry topic, without a proxy id.
func TestCPETelemetry(t *testing.T) {
	src := &subflows{}
	clk := &clock{t: t0}
	a, err := New(Config{CPEID: "cpe-0001", WATs: map[string]string{"nr": "nr0", "wifi": "wlan0"},
		SafeWeights: payload.Weights{"nr": 1, "wifi": 1}, StateDir: t.TempDir(), TelemetryInterval: time.Second, MPTCPOnly: true},
		Deps{Backend: backend.Own(dryrun.New()), Links: newFakeLinks(), Subflows: src, Metrics: metrics.New(),
			Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	peer := netip.MustParseAddr("10.31.0.1")
	sf := func(src string, cookie, acked uint64) telemetry.Subflow {
		return telemetry.Subflow{Src: netip.MustParseAddr(src), Dst: peer, Cookie: cookie, BytesAcked: acked, MPTCP: true, Cwnd: 10, RTTMicros: 5000}
	}
	aggs := map[string]*telemetry.Aggregator{}
	src.list = []telemetry.Subflow{sf("10.31.1.1", 1, 0), sf("10.31.2.1", 2, 0)}
	a.sampleTelemetry(aggs)
	clk.t = clk.t.Add(time.Second)
	src.list = []telemetry.Subflow{sf("10.31.1.1", 1, 2_500_000), sf("10.31.2.1", 2, 125_000), sf("192.0.2.9", 3, 9_999_999)}
	a.sampleTelemetry(aggs)
	_, pending := a.out.q.take()
	m, ok := pending["mcw/v1/s/47/cpe/cpe-0001/telemetry"]
	if !ok || m.retained || len(pending) != 3 { // the started state and the legacy clear beside it
		t.Fatalf("queued %v", pending)
	}
	tm, err := payload.ParseTelemetry(m.data)
	if err != nil {
		t.Fatal(err)
	}
	if tm.ProxyID != "" || tm.WATs["nr"].UL == nil || tm.WATs["nr"].UL.DeliveredMbps != 20 || tm.WATs["wifi"].UL.DeliveredMbps != 1 {
		t.Fatalf("telemetry %+v", tm)
	}
}

// TestMissingInterfaceKeepsItsName: a WAT whose interface does not exist
// at start is handed to the backend under its configured interface (weight
// 0, no address, its link lost), so a backend that works per interface
// knows which one.
func TestMissingInterfaceKeepsItsName(t *testing.T) {
	links := newFakeLinks()
	delete(links.initial, "wlan0")
	be := dryrun.New()
	a, err := New(Config{CPEID: "cpe-0001", WATs: map[string]string{"nr": "nr0", "wifi": "wlan0"},
		SafeWeights: payload.Weights{"nr": 1, "wifi": 1}, StateDir: t.TempDir()},
		Deps{Backend: backend.Own(be), Links: links, Metrics: metrics.New(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	all := be.Applied()
	if len(all) != 1 {
		t.Fatalf("%d applies at start", len(all))
	}
	want := []backend.Path{
		{WAT: "nr", Interface: "nr0", Index: 2, Addr: netip.MustParseAddr("10.31.1.1"), Weight: 1},
		{WAT: "wifi", Interface: "wlan0", Weight: 0, Down: true},
	}
	if diff := cmp.Diff(want, all[0], cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
		t.Fatalf("paths (-want +got):\n%s", diff)
	}
}
