package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/dryrun"
	"github.com/mcw-xapp/kernel-agent/linkwatch"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/payload"
	"github.com/mcw-xapp/kernel-agent/state"
	"github.com/mcw-xapp/kernel-agent/supervisor"
)

func updates(t *testing.T, a *Agent, result string) float64 {
	t.Helper()
	return metrics.Value(a.deps.Metrics.Updates.WithLabelValues(result))
}

// TestLeaseFromIssueTime is the regression test of the lease start: an
// agent without saved state used to apply an old retained message with a
// full lease counted from its arrival.
func TestLeaseFromIssueTime(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir)
	_, n := h.pub.waitEvent(t, payload.EventStarted, 0)
	safe := payload.Weights{"nr": 1, "wifi": 1}

	// The retained message of ten minutes ago, lease 60 s: not applied.
	h.agent.HandleWeights(weightsMsgAt(7, time.Now().Add(-10*time.Minute), 60, `{"nr":0,"wifi":9}`), time.Now())
	s, n := h.pub.waitEvent(t, payload.EventRejected, n)
	if diff := cmp.Diff(safe, s.AppliedWeights); diff != "" || s.AppliedVersion != 0 {
		t.Fatalf("old message: version %d, weights (-want +got):\n%s", s.AppliedVersion, diff)
	}
	if !strings.Contains(s.LastError, "lease already expired") || !strings.Contains(s.LastError, "version 7") {
		t.Fatalf("old message: last_error %q", s.LastError)
	}
	if diff := cmp.Diff(safe, h.be.Last()); diff != "" {
		t.Fatalf("old message reached the kernel (-want +got):\n%s", diff)
	}
	if got := updates(t, h.agent, "expired"); got != 1 {
		t.Fatalf("updates{result=expired} = %v", got)
	}

	// Issued 58.5 s ago with a lease of 60 s: applied, and the lease ends
	// 1.5 s after arrival, not 60 s.
	issued := time.Now().Add(-58500 * time.Millisecond)
	t0 := time.Now()
	h.agent.HandleWeights(weightsMsgAt(8, issued, 60, `{"nr":0,"wifi":9}`), t0)
	if s, n = h.pub.waitEvent(t, payload.EventApplied, n); s.AppliedVersion != 8 {
		t.Fatalf("fresh enough message: %+v", s)
	}
	waitRecord(t, h.store, func(r state.Record) bool {
		return r.Version == 8 && r.LeaseUntilMs == issued.UnixMilli()+60_000
	})
	s, _ = h.pub.waitEvent(t, payload.EventLeaseExpired, n)
	if el := time.Since(t0); el > 3*time.Second {
		t.Fatalf("lease expired %v after arrival, want about 1.5 s", el)
	}
	if diff := cmp.Diff(safe, s.AppliedWeights); diff != "" {
		t.Fatalf("after expiry (-want +got):\n%s", diff)
	}
}

// TestIssueTimeChecks covers the rest of the issue-time rules: a message
// from beyond the skew allowance is refused and leaves the lease alone, a
// newer message that arrives expired ends the lease in force.
func TestIssueTimeChecks(t *testing.T) {
	h := start(t, t.TempDir())
	_, n := h.pub.waitEvent(t, payload.EventStarted, 0)
	h.agent.HandleWeights(weightsMsg(5, 600, `{"nr":4,"wifi":9}`), time.Now())
	_, n = h.pub.waitEvent(t, payload.EventApplied, n)

	h.agent.HandleWeights(weightsMsgAt(6, time.Now().Add(time.Minute), 600, `{"nr":1,"wifi":0}`), time.Now())
	s, n := h.pub.waitEvent(t, payload.EventRejected, n)
	if s.AppliedVersion != 5 || !strings.Contains(s.LastError, "issued in the future") || updates(t, h.agent, "future") != 1 {
		t.Fatalf("future message: %+v", s)
	}
	// Within the skew allowance (2 s) it is accepted.
	h.agent.HandleWeights(weightsMsgAt(6, time.Now().Add(time.Second), 600, `{"nr":3,"wifi":9}`), time.Now())
	if s, n = h.pub.waitEvent(t, payload.EventApplied, n); s.AppliedVersion != 6 {
		t.Fatalf("message within the skew: %+v", s)
	}

	// Version 7 arrives after its lease: refused, and nothing changes, not
	// even the lease of version 6 (it used to end it and raise the mark).
	h.agent.HandleWeights(weightsMsgAt(7, time.Now().Add(-time.Hour), 60, `{"nr":0,"wifi":9}`), time.Now())
	s, _ = h.pub.waitEvent(t, payload.EventRejected, n)
	if diff := cmp.Diff(payload.Weights{"nr": 3, "wifi": 9}, s.AppliedWeights); diff != "" || s.AppliedVersion != 6 {
		t.Fatalf("expired newer message: version %d (-want +got):\n%s", s.AppliedVersion, diff)
	}
	waitRecord(t, h.store, func(r state.Record) bool { return r.Version == 6 && r.Weights != nil && r.LeaseUntilMs > 0 })
}

// TestVersionPoisoning: no message the xApp's certificate could sign, and
// no saved state, locks a CPE out. A valid message far ahead in versions
// used to be applied, after which every normal version was stale; an
// expired one far ahead used to end the lease and raise the mark; an xApp
// restarted with an empty store (versions from 1 again) was refused.
func TestVersionPoisoning(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir)
	_, n := h.pub.waitEvent(t, payload.EventStarted, 0)
	t0 := time.Now()
	steps := []struct {
		name        string
		version     int64
		issued      time.Time
		lease       float64
		wantEvent   string
		wantVersion int64
	}{
		{"normal", 5, t0.Add(-50 * time.Minute), 3600, payload.EventApplied, 5},
		{"expired, far ahead", 1 << 40, t0.Add(-40 * time.Minute), 60, payload.EventRejected, 5},
		{"far ahead, valid", 5 + 1<<32 - 5, t0.Add(-3 * time.Second), 600, payload.EventApplied, 5 + 1<<32 - 5},
		{"the xApp's next version", 6, t0.Add(-2 * time.Second), 600, payload.EventApplied, 6},
		{"near 2^53", 1<<53 - 2, t0.Add(-1500 * time.Millisecond), 600, payload.EventApplied, 1<<53 - 2},
		{"xApp restarted with an empty store", 1, t0.Add(-time.Second), 600, payload.EventApplied, 1},
		{"replay of an older message", 6, t0.Add(-2 * time.Second), 600, payload.EventRejected, 1},
		{"the xApp's next after those", 2, t0.Add(-500 * time.Millisecond), 600, payload.EventApplied, 2},
	}
	for _, st := range steps {
		h.agent.HandleWeights(weightsMsgAt(st.version, st.issued, st.lease, `{"nr":2,"wifi":3}`), time.Now())
		var s payload.State
		s, n = h.pub.waitEvent(t, st.wantEvent, n)
		if s.AppliedVersion != st.wantVersion {
			t.Fatalf("%s: applied_version %d, want %d (%s)", st.name, s.AppliedVersion, st.wantVersion, s.LastError)
		}
		if diff := cmp.Diff(payload.Weights{"nr": 2, "wifi": 3}, s.AppliedWeights); diff != "" {
			t.Fatalf("%s: the lease in force ended (-want +got):\n%s", st.name, diff)
		}
	}
	if got := updates(t, h.agent, "expired"); got != 1 {
		t.Fatalf("updates{result=expired} = %v", got)
	}
	waitRecord(t, h.store, func(r state.Record) bool { return r.Version == 2 && r.LeaseUntilMs > 0 })

	// A saved mark from beyond the CPE's clock (an older agent's, or a
	// clock stepped back) is discarded at start.
	h.stop()
	store, err := state.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	ahead := time.Now().Add(24 * time.Hour)
	if err := store.Save(state.Record{Version: 1<<53 - 2, IssuedAtMs: ahead.UnixMilli(), Weights: payload.Weights{"nr": 9, "wifi": 1},
		Mode: "fixed_split", LeaseUntilMs: ahead.UnixMilli(), SavedAtMs: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	h2 := start(t, dir)
	s, n := h2.pub.waitEvent(t, payload.EventStarted, 0)
	if diff := cmp.Diff(payload.Weights{"nr": 1, "wifi": 1}, s.AppliedWeights); diff != "" {
		t.Fatalf("a poisoned saved lease was restored (-want +got):\n%s", diff)
	}
	h2.agent.HandleWeights(weightsMsg(1, 600, `{"nr":2,"wifi":3}`), time.Now())
	if s, _ := h2.pub.waitEvent(t, payload.EventApplied, n); s.AppliedVersion != 1 {
		t.Fatalf("after a poisoned state: %+v", s)
	}
}

func waitRecord(t *testing.T, store *state.Store, ok func(state.Record) bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		rec, found, err := store.Load()
		if found && err == nil && ok(rec) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("persisted record %+v (found %v, err %v)", rec, found, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// blocking is a backend whose Apply can be made to hang, like a netlink
// call that never returns.
type blocking struct {
	*dryrun.Backend
	mu      sync.Mutex
	hang    bool
	release chan struct{}
}

func (b *blocking) Apply(ctx context.Context, p []backend.Path) error {
	b.mu.Lock()
	hang := b.hang
	b.mu.Unlock()
	if hang {
		<-b.release
	}
	return b.Backend.Apply(ctx, p)
}

// failingLinks is a link source whose subscription fails after a while.
type failingLinks struct {
	*fakeLinks
	fail chan error
}

func (f *failingLinks) Run(ctx context.Context, out chan<- linkwatch.Status, beat func()) error {
	for {
		beat()
		select {
		case <-ctx.Done():
			return nil
		case err := <-f.fail:
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func health(t *testing.T, sup *supervisor.Supervisor) (int, map[string]supervisor.Status) {
	t.Helper()
	rec := httptest.NewRecorder()
	sup.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	var body struct {
		OK      bool                `json:"ok"`
		Workers []supervisor.Status `json:"workers"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("healthz body %q: %v", rec.Body.String(), err)
	}
	byName := map[string]supervisor.Status{}
	for _, w := range body.Workers {
		byName[w.Name] = w
	}
	return rec.Code, byName
}

// TestSupervisedWorkers stalls the decision loop (a backend call that
// hangs) and kills the link watcher, and checks that the health endpoint
// fails, the worker's metric drops and the supervisor returns the error
// that makes the agent exit.
func TestSupervisedWorkers(t *testing.T) {
	tests := []struct {
		name    string
		worker  string
		wantErr error
		kill    func(be *blocking, links *failingLinks, a *Agent)
	}{
		{"loop stalls in a backend call", "loop", supervisor.ErrStalled, func(be *blocking, _ *failingLinks, a *Agent) {
			be.mu.Lock()
			be.hang = true
			be.mu.Unlock()
			a.HandleWeights(weightsMsg(3, 60, `{"nr":4,"wifi":9}`), time.Now())
		}},
		{"link watcher dies", "links", errNetlinkGone, func(_ *blocking, links *failingLinks, _ *Agent) {
			links.fail <- errNetlinkGone
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := &blocking{Backend: dryrun.New(), release: make(chan struct{})}
			links := &failingLinks{fakeLinks: newFakeLinks(), fail: make(chan error, 1)}
			m := metrics.New()
			a, err := New(Config{
				CPEID: "cpe-0001", WATs: map[string]string{"nr": "nr0", "wifi": "wlan0"},
				SafeWeights: payload.Weights{"nr": 1, "wifi": 1}, StateDir: t.TempDir(),
			}, Deps{Backend: backend.Own(be), Links: links, Metrics: m, Log: slog.New(slog.NewJSONHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			a.stall = stalls{loop: 300 * time.Millisecond, links: 300 * time.Millisecond, persister: time.Second, publisher: time.Second}
			sup := supervisor.New(supervisor.Config{OnChange: m.SetWorkerUp, Grace: 2 * time.Second})
			for _, w := range a.Workers(&recorder{}) {
				sup.Add(w)
			}
			done := make(chan error, 1)
			go func() { done <- sup.Run(context.Background()) }()

			deadline := time.Now().Add(5 * time.Second)
			for {
				code, ws := health(t, sup)
				if code == http.StatusOK && ws["loop"].State == supervisor.StateRunning && a.LastState("cpe-0001") != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("never healthy: %d %+v", code, ws)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if got := metrics.Value(m.WorkerUp.WithLabelValues(tt.worker)); got != 1 {
				t.Fatalf("worker_up{%s} = %v before", tt.worker, got)
			}

			tt.kill(be, links, a)
			for {
				code, ws := health(t, sup)
				if code == http.StatusServiceUnavailable && ws[tt.worker].State != supervisor.StateRunning {
					if ws[tt.worker].Error == "" {
						t.Fatalf("%s: no error in %+v", tt.worker, ws[tt.worker])
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("health never failed: %d %+v", code, ws)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if got := metrics.Value(m.WorkerUp.WithLabelValues(tt.worker)); got != 0 {
				t.Fatalf("worker_up{%s} = %v after", tt.worker, got)
			}
			close(be.release) // let the hung call return so the shutdown is clean
			err = <-done
			var werr *supervisor.WorkerError
			if !errors.As(err, &werr) || werr.Worker != tt.worker || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Run = %v, want worker %s failing with %v", err, tt.worker, tt.wantErr)
			}
		})
	}
}

var errNetlinkGone = errors.New("netlink: no buffer space")

// TestEmptyRetainedWeights: an empty retained message (the weights cleared
// on the broker) means no weights, as in the proxy role: the lease ends and
// the safe weights stand. It used to be reported as a rejected message.
func TestEmptyRetainedWeights(t *testing.T) {
	h := start(t, t.TempDir())
	_, n := h.pub.waitEvent(t, payload.EventStarted, 0)
	v5 := weightsMsg(5, 600, `{"nr":4,"wifi":9}`)
	h.agent.HandleWeights(v5, time.Now())
	_, n = h.pub.waitEvent(t, payload.EventApplied, n)
	h.agent.HandleWeights(nil, time.Now())
	s, _ := h.pub.waitEvent(t, payload.EventLeaseExpired, n)
	if diff := cmp.Diff(payload.Weights{"nr": 1, "wifi": 1}, s.AppliedWeights); diff != "" || s.LastError != "" {
		t.Fatalf("after the weights were cleared: %+v (-want +got):\n%s", s, diff)
	}
	if got := updates(t, h.agent, "cleared"); got != 1 || updates(t, h.agent, "invalid") != 0 {
		t.Fatalf("updates{result=cleared} = %v, invalid = %v", got, updates(t, h.agent, "invalid"))
	}
	// The mark stays: the cleared update cannot come back as a replay.
	h.agent.HandleWeights(v5, time.Now())
	h.agent.HandleWeights(nil, time.Now()) // no lease: nothing to end
	waitRecord(t, h.store, func(r state.Record) bool { return r.Version == 5 && r.Weights == nil })
	for deadline := time.Now().Add(2 * time.Second); updates(t, h.agent, "replay") != 1 || updates(t, h.agent, "cleared") != 2; {
		if time.Now().After(deadline) {
			t.Fatalf("updates{result=replay} = %v, cleared = %v", updates(t, h.agent, "replay"), updates(t, h.agent, "cleared"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := updates(t, h.agent, "applied"); got != 1 {
		t.Fatalf("updates{result=applied} = %v: the replay was applied", got)
	}
}

// TestUnclaimableAddressNotReported: a WAT whose interface has an address
// no peer accepts as a CPE's own (loopback here) is reported without it, so
// the rest of the state still reaches the proxy and the xApp.
func TestUnclaimableAddressNotReported(t *testing.T) {
	h := start(t, t.TempDir())
	_, n := h.pub.waitEvent(t, payload.EventStarted, 0)
	h.links.ch <- linkwatch.Status{Interface: "nr0", Index: 2, LinkUp: true, Addr: netip.MustParseAddr("127.0.0.1")}
	s, _ := h.pub.waitEvent(t, payload.EventLinkUp, n)
	if _, ok := s.Addresses["nr"]; ok || s.Addresses["wifi"] == "" {
		t.Fatalf("addresses %v: want wifi only", s.Addresses)
	}
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := payload.ParseState(b); err != nil {
		t.Fatalf("the state is refused: %v", err)
	}
}

// TestCPERetriesFailedApply: as the proxy, the CPE role tries a failed
// apply again each second by itself (the kernel's state is unknown after
// it), reports a failure that repeats itself once, and is back in the
// kernel as soon as the backend recovers; the refused update was rolled
// back, so its redelivery applies.
func TestCPERetriesFailedApply(t *testing.T) {
	h := start(t, t.TempDir())
	_, n := h.pub.waitEvent(t, payload.EventStarted, 0)
	h.be.SetErr(errors.New("kernel says no"))
	v3 := weightsMsg(3, 60, `{"nr":4,"wifi":9}`)
	h.agent.HandleWeights(v3, time.Now())
	s, n := h.pub.waitEvent(t, payload.EventRejected, n)
	if s.LastError != "kernel says no" || s.AppliedVersion != 0 || len(s.AppliedWeights) != 0 {
		t.Fatalf("failed apply: %+v", s)
	}
	time.Sleep(2500 * time.Millisecond) // two retries, failing alike
	h.pub.mu.Lock()
	after := len(h.pub.states) - n
	h.pub.mu.Unlock()
	if after != 0 || metrics.Value(h.agent.deps.Metrics.ApplyErrors) < 3 {
		t.Fatalf("%d more states, %v apply errors: the retries should run silently", after, metrics.Value(h.agent.deps.Metrics.ApplyErrors))
	}
	h.be.SetErr(nil)
	s, n = h.pub.waitEvent(t, payload.EventApplied, n)
	if diff := cmp.Diff(payload.Weights{"nr": 1, "wifi": 1}, s.AppliedWeights); diff != "" || s.LastError != "" {
		t.Fatalf("after the retry (-want +got):\n%s", diff)
	}
	h.agent.HandleWeights(v3, time.Now())
	if s, _ = h.pub.waitEvent(t, payload.EventApplied, n); s.AppliedVersion != 3 || s.AppliedWeights["nr"] != 4 {
		t.Fatalf("redelivered update: %+v", s)
	}
}
