package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/dryrun"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// rejoinBackend is a backend that checks the paths it put back
// (backend.Rejoiner): it records when it is asked and gives the answers
// it holds in turn (then nothing to report, nothing pending).
type rejoinBackend struct {
	backend.Backend
	mu      sync.Mutex
	asked   []time.Time
	answers []rejoinAnswer
}

type rejoinAnswer struct {
	rep backend.RejoinReport
	err error
}

func (b *rejoinBackend) Rejoin(_ context.Context, now time.Time) (backend.RejoinReport, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked = append(b.asked, now)
	if len(b.answers) == 0 {
		return backend.RejoinReport{}, nil
	}
	a := b.answers[0]
	b.answers = b.answers[1:]
	return a.rep, a.err
}

func (b *rejoinBackend) calls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.asked)
}

// TestRejoinChecks: the backend checks the paths it put back after every
// apply that wrote the kernel and when its timer fires (the loop's
// checkRejoins); what it put back again or gave up on is counted by WAT,
// and a failed check has the set applied again, though it did not change.
func TestRejoinChecks(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: t0}
	dry := dryrun.New()
	be := &rejoinBackend{Backend: backend.Own(dry), answers: []rejoinAnswer{
		{rep: backend.RejoinReport{Next: t0.Add(500 * time.Millisecond)}},
		{rep: backend.RejoinReport{Readded: []string{"wifi"}, Next: t0.Add(1500 * time.Millisecond)}},
		{rep: backend.RejoinReport{GaveUp: []string{"wifi"}}},
		{err: errors.New("sock_diag: EPERM")},
	}}
	a := cpeAgent(t, t.TempDir(), be, clk)
	m := a.deps.Metrics
	if be.calls() != 1 || !be.asked[0].Equal(t0) {
		t.Fatalf("after Start: asked at %v, want once at t0", be.asked)
	}
	steps := []struct {
		name               string
		at                 time.Duration
		readded, gaveUp    float64
		wantApplies        int // ApplyAll calls after the step
		wantRejoinApplies  float64
		wantAskedAfterStep int
	}{
		{"put back again", 500 * time.Millisecond, 1, 0, 1, 0, 2},
		{"given up", 1500 * time.Millisecond, 1, 1, 1, 0, 3},
		// The set is applied again at once (by the flush after the
		// timer), and the backend asked after that apply.
		{"check failed", 2 * time.Second, 1, 1, 2, 1, 5},
	}
	for _, st := range steps {
		clk.t = t0.Add(st.at)
		a.checkRejoins(ctx)
		a.flush(ctx)
		if got := metrics.Value(m.Rejoins.WithLabelValues("wifi", "readded")); got != st.readded {
			t.Errorf("%s: readded %v, want %v", st.name, got, st.readded)
		}
		if got := metrics.Value(m.Rejoins.WithLabelValues("wifi", "gave_up")); got != st.gaveUp {
			t.Errorf("%s: gave_up %v, want %v", st.name, got, st.gaveUp)
		}
		if got := len(dry.Applied()); got != st.wantApplies {
			t.Errorf("%s: %d applies, want %d", st.name, got, st.wantApplies)
		}
		if got := metrics.Value(m.Applies.WithLabelValues("rejoin")); got != st.wantRejoinApplies {
			t.Errorf("%s: %v applies for a rejoin, want %v", st.name, got, st.wantRejoinApplies)
		}
		if got := be.calls(); got != st.wantAskedAfterStep {
			t.Errorf("%s: asked %d times, want %d", st.name, got, st.wantAskedAfterStep)
		}
	}
	// A batch that changes nothing writes nothing, so nothing is checked.
	a.Process(ctx)
	if got := be.calls(); got != 5 {
		t.Errorf("an idle batch asked the backend: %d calls", got)
	}
	if w := dry.Last(); w["nr"] != 1 || w["wifi"] != 1 {
		t.Errorf("weights in force %v", w)
	}
}

// TestRejoinTimer: the loop asks again when the backend's next check is
// due, and no more once nothing is pending.
func TestRejoinTimer(t *testing.T) {
	be := &rejoinBackend{Backend: backend.Own(dryrun.New())}
	// At Start: due at once; then nothing pending.
	be.answers = []rejoinAnswer{{rep: backend.RejoinReport{Next: time.Now()}}}
	a, err := New(Config{CPEID: "cpe-0001", WATs: map[string]string{"nr": "nr0", "wifi": "wlan0"},
		SafeWeights: payload.Weights{"nr": 1, "wifi": 1}, StateDir: t.TempDir()},
		Deps{Backend: be, Links: newFakeLinks(), Metrics: metrics.New(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for be.calls() < 2 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	if n := be.calls(); n != 2 {
		t.Fatalf("asked %d times, want 2 (at Start, then when due)", n)
	}
}
