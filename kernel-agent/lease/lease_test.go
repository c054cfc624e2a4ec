package lease

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestTrackerOrder(t *testing.T) {
	t0 := time.Unix(1_763_800_000, 0)
	tr := New(Config{MaxClockSkew: time.Second})
	steps := []struct {
		name    string
		version int64
		issued  time.Duration // after t0
		wantErr error
	}{
		{"first", 5, 0, nil},
		{"replay", 5, 0, ErrReplay},
		{"lower version, same millisecond", 4, 0, ErrStale},
		{"newer", 9, 0, nil},
		{"issued earlier, higher version", 10, -time.Millisecond, ErrStale},
		{"issued later, lower version: an xApp restarted with an empty store", 1, time.Millisecond, nil},
		{"far ahead in versions", 1<<53 - 1, 2 * time.Millisecond, nil},
		{"the xApp's next, issued later", 2, 3 * time.Millisecond, nil},
	}
	for _, s := range steps {
		u := Update{Version: s.version, IssuedAt: t0.Add(s.issued), Lease: 2500 * time.Millisecond}
		until, err := tr.Check(u, t0)
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
			t.Fatalf("%s: Check(%d) = %v, want %v", s.name, s.version, err, s.wantErr)
		}
		if err == nil {
			tr.Grant(u.Mark(), until)
		}
	}
	if got := tr.Mark(); got != (Mark{IssuedMs: t0.Add(3 * time.Millisecond).UnixMilli(), Version: 2}) {
		t.Fatalf("Mark = %+v", got)
	}
	if got := tr.Remaining(t0.Add(time.Second)); got != 1500*time.Millisecond {
		t.Fatalf("Remaining = %v", got)
	}
	if got := tr.Remaining(t0.Add(3 * time.Second)); got != 0 {
		t.Fatalf("Remaining after the end = %v", got)
	}
	m := tr.Mark()
	tr.Expire()
	if _, err := tr.Check(Update{Version: m.Version, IssuedAt: time.UnixMilli(m.IssuedMs), Lease: time.Second}, t0); tr.Active() || !tr.Until().IsZero() || !errors.Is(err, ErrReplay) {
		t.Fatal("after Expire the lease must be gone and the mark still blocked")
	}
}

// TestRefusedChangesNothing: a refused update leaves the mark and the
// lease as they were, whatever its version (an expired update far ahead
// used to end the lease and raise the high-water mark).
func TestRefusedChangesNothing(t *testing.T) {
	now := time.Unix(1_763_800_000, 0)
	for _, u := range []Update{
		{Version: 1 << 52, IssuedAt: now.Add(-time.Hour), Lease: time.Minute}, // expired
		{Version: 1 << 52, IssuedAt: now.Add(time.Hour), Lease: time.Minute},  // future
		{Version: 1, IssuedAt: now.Add(-2 * time.Second), Lease: time.Minute}, // stale
	} {
		tr := New(Config{MaxClockSkew: 5 * time.Second})
		first := Update{Version: 7, IssuedAt: now.Add(-time.Second), Lease: time.Minute}
		until, err := tr.Check(first, now)
		if err != nil {
			t.Fatal(err)
		}
		tr.Grant(first.Mark(), until)
		if _, err := tr.Check(u, now); err == nil {
			t.Fatalf("%+v accepted", u)
		}
		if tr.Mark() != first.Mark() || !tr.Active() || !tr.Until().Equal(until) {
			t.Fatalf("after refusing %+v: mark %+v active %v until %v", u, tr.Mark(), tr.Active(), tr.Until())
		}
	}
}

// TestPoisonBoundedBySkew: the furthest an accepted update can put the mark
// is the device's clock plus the skew, so once that much time has passed
// the xApp's ordinary updates pass again.
func TestPoisonBoundedBySkew(t *testing.T) {
	now := time.Unix(1_763_800_000, 0)
	skew := 5 * time.Second
	tr := New(Config{MaxClockSkew: skew})
	poison := Update{Version: 1<<53 - 1, IssuedAt: now.Add(skew), Lease: time.Hour}
	until, err := tr.Check(poison, now)
	if err != nil {
		t.Fatal(err)
	}
	tr.Grant(poison.Mark(), until)
	later := now.Add(skew + time.Millisecond)
	if _, err := tr.Check(Update{Version: 1, IssuedAt: later, Lease: time.Minute}, later); err != nil {
		t.Fatalf("an ordinary update after the skew: %v", err)
	}
	// Restore drops a saved mark from beyond the clock, with its lease.
	r := New(Config{MaxClockSkew: skew})
	if r.Restore(Mark{IssuedMs: now.Add(time.Hour).UnixMilli(), Version: 3}, now.Add(time.Hour), now) || r.Active() || r.Mark() != (Mark{}) {
		t.Fatalf("a mark from the future was kept: %+v", r.Mark())
	}
	if !r.Restore(Mark{IssuedMs: now.UnixMilli(), Version: 3}, time.Time{}, now) || r.Active() || r.Version() != 3 {
		t.Fatal("Restore without lease")
	}
}

func TestResult(t *testing.T) {
	for err, want := range map[error]string{nil: "", ErrReplay: "replay", ErrStale: "stale", ErrFuture: "future",
		ErrExpired: "expired", errors.New("other"): "invalid"} {
		if got := Result(err); got != want {
			t.Errorf("Result(%v) = %q, want %q", err, got, want)
		}
	}
}

// TestLeaseFromIssueTime is the regression test of the lease: it used to
// start on arrival, so an old retained message got a full lease.
func TestLeaseFromIssueTime(t *testing.T) {
	now := time.Unix(1_763_800_000, 0)
	tests := []struct {
		name      string
		issuedAgo time.Duration // negative: issued in the future
		lease     time.Duration
		wantUntil time.Time
		wantErr   error
	}{
		{"fresh", 0, time.Minute, now.Add(time.Minute), nil},
		{"half gone", 30 * time.Second, time.Minute, now.Add(30 * time.Second), nil},
		{"old retained message", 10 * time.Minute, time.Minute, now.Add(-9 * time.Minute), ErrExpired},
		{"ends exactly now", time.Minute, time.Minute, now, ErrExpired},
		{"ahead within the skew, capped at now+lease", -4 * time.Second, time.Minute, now.Add(time.Minute), nil},
		{"ahead by the skew", -5 * time.Second, time.Minute, now.Add(time.Minute), nil},
		{"ahead beyond the skew", -5*time.Second - time.Millisecond, time.Minute, time.Time{}, ErrFuture},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := New(Config{MaxClockSkew: 5 * time.Second})
			until, err := tr.Check(Update{Version: 1, IssuedAt: now.Add(-tt.issuedAgo), Lease: tt.lease}, now)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Check = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.wantUntil, until); diff != "" {
				t.Fatalf("until (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStage: an update being applied orders the ones after it (its copy is
// a replay, an older one stale) but changes neither the version nor the
// lease until it is granted; aborted, its redelivery is judged afresh.
func TestStage(t *testing.T) {
	now := time.UnixMilli(1763800000000)
	tr := New(Config{MaxClockSkew: time.Second})
	first := Update{Version: 1, IssuedAt: now.Add(-time.Second), Lease: time.Minute}
	until, err := tr.Check(first, now)
	if err != nil {
		t.Fatal(err)
	}
	tr.Grant(first.Mark(), until)
	next := Update{Version: 2, IssuedAt: now, Lease: time.Minute}
	if _, err := tr.Check(next, now); err != nil {
		t.Fatal(err)
	}
	tr.Stage(next.Mark())
	if tr.Version() != 1 || !tr.Until().Equal(until) {
		t.Fatalf("staging changed the version %d or the lease %v", tr.Version(), tr.Until())
	}
	older := Update{Version: 9, IssuedAt: now.Add(-500 * time.Millisecond), Lease: time.Minute}
	for name, tc := range map[string]struct {
		u    Update
		want error
	}{"copy of the staged": {next, ErrReplay}, "older than the staged": {older, ErrStale}} {
		if _, err := tr.Check(tc.u, now); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	tr.Abort()
	if _, err := tr.Check(next, now); err != nil {
		t.Fatalf("after Abort the staged update is judged afresh: %v", err)
	}
	tr.Stage(next.Mark())
	tr.Grant(next.Mark(), now.Add(time.Minute))
	if tr.Version() != 2 {
		t.Fatalf("granted version %d", tr.Version())
	}
	if _, err := tr.Check(older, now); !errors.Is(err, ErrStale) {
		t.Fatalf("after Grant: %v", err)
	}
}
