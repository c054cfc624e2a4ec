package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
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
)

// classBackend records what it is handed, as a backend with traffic
// classes: it reports per class the caps it was handed, and refuses
// classes that match a cgroup when told to.
type classBackend struct {
	mu        sync.Mutex
	max       int
	noCgroups bool
	sets      [][]backend.Device
}

func (b *classBackend) Name() string { return payload.BackendMPTCPShares }

func (b *classBackend) Capabilities() payload.Capabilities {
	return payload.Capabilities{MaxWeight: payload.MaxWeight, Semantics: payload.SemanticsRateCaps, MaxClasses: b.max}
}

func (b *classBackend) ApplyAll(_ context.Context, ds []backend.Device) (map[string]error, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sets = append(b.sets, ds)
	return nil, nil
}

func (b *classBackend) Close() error { return nil }

// last is what the latest ApplyAll handed for cpeID.
func (b *classBackend) last(cpeID string) backend.Device {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range b.sets[len(b.sets)-1] {
		if d.CPEID == cpeID {
			return d
		}
	}
	return backend.Device{}
}

func (b *classBackend) AppliedClasses(cpeID string) map[string]payload.AppliedClass {
	out := map[string]payload.AppliedClass{}
	for _, c := range b.last(cpeID).Classes {
		out[c.Name] = payload.AppliedClass{CapsMbps: c.CapsMbps, Urgent: c.Urgent}
	}
	return out
}

func (b *classBackend) CheckClasses(cs []payload.Class) error {
	for _, c := range cs {
		if b.noCgroups && c.Match.Cgroup != "" {
			return fmt.Errorf("class %s: no cgroup here", c.Name)
		}
	}
	return nil
}

// cpeAgent is a started CPE agent on be with links nr0 and wlan0 up,
// driven step by step (Process).
func cpeAgent(t *testing.T, dir string, be backend.Backend, clk *clock) *Agent {
	t.Helper()
	a, err := New(Config{CPEID: "cpe-0001", WATs: map[string]string{"nr": "nr0", "wifi": "wlan0"},
		SafeWeights: payload.Weights{"nr": 1, "wifi": 1}, StateDir: dir, MaxClockSkew: 5 * time.Second},
		Deps{Backend: be, Links: newFakeLinks(), Metrics: metrics.New(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return a
}

// classesMsg is a weights message for cpe-0001 whose ul set carries the
// classes given (a JSON array), and whose dl set carries one class.
func classesMsg(version int64, issued time.Time, lease float64, ul, classes string) Message {
	return Message{Topic: mqttclient.TopicsFor("cpe-0001", mqttclient.DefaultShards).Weights, At: issued, Data: []byte(fmt.Sprintf(
		`{"schema":"mcw.weights.v2","cpe_id":"cpe-0001","version":%d,"issued_at_ms":%d,"lease_s":%g,`+
			`"dl":{"mode":"fixed_split","weights":{"nr":1},"classes":[{"name":"dl-only","match":{"dscp":[1]},"mode":"fixed_split","weights":{"nr":1}}]},`+
			`"ul":{"mode":"load_balancing","weights":%s,"classes":%s}}`,
		version, issued.UnixMilli(), lease, ul, classes))}
}

const twoClasses = `[{"name":"control","match":{"remote_ports":[[5000,5000]]},"mode":"priority","weights":{"nr":1,"wifi":0,"lifi":4},"caps_mbps":{"nr":2},"urgent":true},` +
	`{"name":"bulk","match":{"dscp":[8]},"mode":"load_balancing","weights":{"wifi":1}}]`

func stateOf(t *testing.T, a *Agent) payload.State {
	t.Helper()
	s, err := payload.ParseState(a.LastState("cpe-0001"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestClassesNeedTheCapability: a backend without classes (max_classes 0)
// refuses a message whose own direction carries them, naming why, and
// keeps what is in force; classes of the other direction are not its
// business.
func TestClassesNeedTheCapability(t *testing.T) {
	clk := &clock{t: t0}
	be := dryrun.New()
	a := cpeAgent(t, t.TempDir(), backend.Own(be), clk)
	if s := stateOf(t, a); s.Capabilities.MaxClasses != 0 {
		t.Fatalf("dry-run reports max_classes %d", s.Capabilities.MaxClasses)
	}
	a.Process(context.Background(), weights("cpe-0001", 3, t0, 60, `{"nr":1}`, `{"nr":3,"wifi":1}`))
	if s := stateOf(t, a); s.Event != payload.EventApplied || s.AppliedVersion != 3 {
		t.Fatalf("without classes: %+v", s)
	}
	ev := a.Process(context.Background(), classesMsg(4, t0, 60, `{"nr":1,"wifi":1}`, twoClasses))
	s := stateOf(t, a)
	if ev != payload.EventRejected || s.AppliedVersion != 3 || !strings.Contains(s.LastError, "ul.classes: 2 traffic classes, but this agent's capabilities.max_classes is 0 (backend dry-run)") {
		t.Fatalf("classes to a backend without: event %s, %+v", ev, s)
	}
	if diff := cmp.Diff(payload.Weights{"nr": 3, "wifi": 1}, be.Last()); diff != "" {
		t.Fatalf("weights in force changed (-want +got):\n%s", diff)
	}
	// Only the dl set has classes: the CPE applies its ul.
	ev = a.Process(context.Background(), classesMsg(5, t0, 60, `{"nr":1,"wifi":2}`, `[]`))
	if s := stateOf(t, a); ev != payload.EventApplied || s.AppliedVersion != 5 || s.AppliedClasses != nil {
		t.Fatalf("dl classes only: event %s, %+v", ev, s)
	}
}

// TestClassesReachTheBackend: the classes go to the backend resolved on
// the device's WATs (a WAT the CPE is not configured with dropped), are
// reported as applied_classes, persisted and restored, and dropped with
// the safe weights at the lease's end.
func TestClassesReachTheBackend(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{t: t0}
	be := &classBackend{max: 8}
	a := cpeAgent(t, dir, be, clk)
	if s := stateOf(t, a); s.Capabilities.MaxClasses != 8 {
		t.Fatalf("max_classes %d, want the backend's 8", s.Capabilities.MaxClasses)
	}
	ev := a.Process(context.Background(), classesMsg(4, t0, 60, `{"nr":1,"wifi":1}`, twoClasses))
	if ev != payload.EventApplied {
		t.Fatalf("event %s: %+v", ev, stateOf(t, a))
	}
	want := []backend.Class{
		{Name: "control", Match: payload.Match{RemotePorts: []payload.PortRange{{5000, 5000}}}, Urgent: true,
			Weights: payload.Weights{"nr": 1, "wifi": 0}, CapsMbps: map[string]float64{"nr": 2}},
		{Name: "bulk", Match: payload.Match{DSCP: []int{8}}, Weights: payload.Weights{"nr": 0, "wifi": 1}},
	}
	if diff := cmp.Diff(want, be.last("cpe-0001").Classes); diff != "" {
		t.Fatalf("classes handed (-want +got):\n%s", diff)
	}
	s := stateOf(t, a)
	if diff := cmp.Diff(map[string]payload.AppliedClass{"control": {CapsMbps: map[string]float64{"nr": 2}, Urgent: true}, "bulk": {}}, s.AppliedClasses); diff != "" {
		t.Fatalf("applied_classes (-want +got):\n%s", diff)
	}
	// Persisted with the set, restored by a restarted agent.
	order, items := a.persist.take()
	for _, id := range order {
		if err := items[id].store.Save(items[id].rec); err != nil {
			t.Fatal(err)
		}
	}
	rec, ok, err := (mustStore(t, dir)).Load()
	if err != nil || !ok || len(rec.Classes) != 2 || rec.Classes[0].Name != "control" || rec.Classes[0].Weights["lifi"] != 0 {
		t.Fatalf("persisted %+v (%v, %v)", rec, ok, err)
	}
	be2 := &classBackend{max: 8}
	a2 := cpeAgent(t, dir, be2, clk)
	if s := stateOf(t, a2); s.Event != payload.EventRestored || len(s.AppliedClasses) != 2 {
		t.Fatalf("restored: %+v", s)
	}
	if diff := cmp.Diff(want, be2.last("cpe-0001").Classes); diff != "" {
		t.Fatalf("restored classes (-want +got):\n%s", diff)
	}
	// The lease ends: safe weights, no classes.
	clk.t = t0.Add(61 * time.Second)
	a2.Process(context.Background())
	if cs := be2.last("cpe-0001").Classes; cs != nil {
		t.Fatalf("classes after the lease: %+v", cs)
	}
	if s := stateOf(t, a2); s.Event != payload.EventLeaseExpired || s.AppliedClasses != nil {
		t.Fatalf("after the lease: %+v", s)
	}
}

func mustStore(t *testing.T, dir string) *state.Store {
	t.Helper()
	s, err := state.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestClassFallsBackWhenItsWATsAreDown: a class whose only weighted WAT
// goes down takes the default rule's weights (and none of its caps)
// until the WAT is back; an unchanged class is not handed again.
func TestClassFallsBackWhenItsWATsAreDown(t *testing.T) {
	clk := &clock{t: t0}
	be := &classBackend{max: 8}
	a := cpeAgent(t, t.TempDir(), be, clk)
	a.Process(context.Background(), classesMsg(4, t0, 60, `{"nr":1,"wifi":3}`, twoClasses))
	down := linkwatch.Status{Interface: "nr0", Index: 2, LinkUp: false}
	a.onLink(down)
	a.Process(context.Background())
	got := be.last("cpe-0001").Classes
	if diff := cmp.Diff(payload.Weights{"nr": 0, "wifi": 3}, got[0].Weights); diff != "" || got[0].CapsMbps != nil || !got[0].Urgent {
		t.Fatalf("control with nr down: caps %v urgent %v, weights (-want +got):\n%s", got[0].CapsMbps, got[0].Urgent, diff)
	}
	if diff := cmp.Diff(payload.Weights{"nr": 0, "wifi": 1}, got[1].Weights); diff != "" {
		t.Fatalf("bulk with nr down (-want +got):\n%s", diff)
	}
	a.onLink(newFakeLinks().initial["nr0"])
	a.Process(context.Background())
	if got := be.last("cpe-0001").Classes[0]; got.Weights["nr"] != 1 || got.CapsMbps["nr"] != 2 {
		t.Fatalf("control with nr back: %+v", got)
	}
}

// TestClassesRefused: more classes than the backend applies, a class
// whose weights are all on WATs the CPE is not configured with, and a
// match the backend cannot express are refused with the reason, and what
// is in force stays.
func TestClassesRefused(t *testing.T) {
	clk := &clock{t: t0}
	be := &classBackend{max: 1, noCgroups: true}
	a := cpeAgent(t, t.TempDir(), be, clk)
	a.Process(context.Background(), classesMsg(3, t0, 60, `{"nr":1,"wifi":1}`, `[{"name":"a","match":{"dscp":[1]},"mode":"priority","weights":{"nr":1}}]`))
	for i, tt := range []struct{ classes, reason string }{
		{twoClasses, "2 traffic classes, but this agent's capabilities.max_classes is 1"},
		{`[{"name":"lifi-only","match":{"dscp":[1]},"mode":"priority","weights":{"lifi":1}}]`, "ul.classes[lifi-only]: no configured WAT"},
		{`[{"name":"app","match":{"cgroup":"/app"},"mode":"priority","weights":{"nr":1}}]`, "ul.classes: class app: no cgroup here"},
	} {
		ev := a.Process(context.Background(), classesMsg(int64(4+i), t0, 60, `{"nr":1,"wifi":1}`, tt.classes))
		s := stateOf(t, a)
		if ev != payload.EventRejected || s.AppliedVersion != 3 || !strings.Contains(s.LastError, tt.reason) {
			t.Errorf("%s: event %s, %+v, want %q", tt.classes, ev, s, tt.reason)
		}
		if cs := be.last("cpe-0001").Classes; len(cs) != 1 || cs[0].Name != "a" {
			t.Errorf("classes in force changed: %+v", cs)
		}
	}
}

// TestProxyClasses: the proxy hands each CPE's dl classes to its
// downlink, masked by the CPE's links, and reports them in the CPE's
// state.
func TestProxyClasses(t *testing.T) {
	clk := &clock{t: t0}
	be := &classBackend{max: 8}
	p, err := New(Config{Role: payload.RoleProxy, ProxyID: "proxy-0001", CPEs: []string{"cpe-0001"},
		SafeWeights: payload.Weights{"nr": 1, "wifi": 1, "lifi": 1}, StateDir: t.TempDir(), MaxClockSkew: 5 * time.Second},
		Deps{Backend: be, Metrics: metrics.New(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	dl := `{"nr":1,"wifi":1},"classes":[{"name":"video","match":{"remote_prefixes":["2001:db8::/32"]},"mode":"fixed_split","weights":{"wifi":1,"lifi":2},"caps_mbps":{"wifi":5}}]`
	p.Process(context.Background(), cpeState("cpe-0001", addrs1, `{"nr":"up","wifi":"up","lifi":"down"}`),
		weights("cpe-0001", 6, t0, 30, dl, `{"nr":1}`))
	got := be.last("cpe-0001").Classes
	if len(got) != 1 || !got[0].Weights.Equal(payload.Weights{"nr": 0, "wifi": 1, "lifi": 0}) || got[0].CapsMbps["wifi"] != 5 {
		t.Fatalf("classes handed: %+v", got)
	}
	b := p.LastState("cpe-0001")
	s, err := payload.ParseState(b)
	if err != nil {
		t.Fatal(err)
	}
	if s.AppliedVersion != 6 || s.AppliedClasses["video"].CapsMbps["wifi"] != 5 {
		t.Fatalf("proxy state %+v", s)
	}
}
