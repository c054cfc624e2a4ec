package lease

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestTrackerVersions(t *testing.T) {
	t0 := time.Unix(1_763_800_000, 0)
	tr := New(Config{})
	steps := []struct {
		name    string
		version int64
		wantErr error
	}{
		{"first", 5, nil},
		{"replay", 5, ErrReplay},
		{"stale", 4, ErrStale},
		{"newer", 9, nil},
		{"older than newer", 6, ErrStale},
		{"largest jump", 9 + MaxVersionJump, nil},
		{"jump too far", 9 + 2*MaxVersionJump + 1, ErrVersionBound},
		{"next after the refused one", 10 + MaxVersionJump, nil},
		{"no room left", MaxVersion + 1, ErrVersionBound},
	}
	for _, s := range steps {
		until, err := tr.Check(Update{Version: s.version, IssuedAt: t0, Lease: 2500 * time.Millisecond}, t0)
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
			t.Fatalf("%s: Check(%d) = %v, want %v", s.name, s.version, err, s.wantErr)
		}
		if err == nil {
			tr.Grant(s.version, until)
		}
	}
	if tr.Version() != 10+MaxVersionJump {
		t.Fatalf("Version = %d", tr.Version())
	}
	if got := tr.Remaining(t0.Add(time.Second)); got != 1500*time.Millisecond {
		t.Fatalf("Remaining = %v", got)
	}
	if got := tr.Remaining(t0.Add(3 * time.Second)); got != 0 {
		t.Fatalf("Remaining after the end = %v", got)
	}
	tr.Expire()
	if _, err := tr.Check(Update{Version: tr.Version(), IssuedAt: t0, Lease: time.Second}, t0); tr.Active() || !tr.Until().IsZero() || err == nil {
		t.Fatal("after Expire the lease must be gone and the version still blocked")
	}
	r := New(Config{})
	r.Restore(7, time.Time{})
	if _, err := r.Check(Update{Version: 7, IssuedAt: t0, Lease: time.Second}, t0); r.Active() || err == nil {
		t.Fatal("Restore without lease")
	}
	if _, err := r.Check(Update{Version: 8, IssuedAt: t0, Lease: time.Second}, t0); err != nil {
		t.Fatalf("Restore without lease: %v", err)
	}
}

// TestVersionLockout is the regression test of the version lock-out: a
// version near 2^53 used to be accepted and persisted, after which every
// later (lower) version was stale. Without saved state the first version
// sets the reference, so the ceiling is what protects a fresh agent.
func TestVersionLockout(t *testing.T) {
	t0 := time.Unix(1_763_800_000, 0)
	u := func(v int64) Update { return Update{Version: v, IssuedAt: t0, Lease: time.Minute} }
	tests := []struct {
		name     string
		restored int64 // 0: no saved state
		version  int64
		wantErr  error
	}{
		{"fresh: near 2^53", 0, MaxSafeVersion - 1, ErrVersionBound},
		{"fresh: at the ceiling", 0, MaxVersion, nil},
		{"fresh: large but below the ceiling", 0, 1 << 40, nil},
		{"saved: near 2^53", 41, MaxSafeVersion - 1, ErrVersionBound},
		{"saved: jump of 2^32+1", 41, 42 + MaxVersionJump, ErrVersionBound},
		{"saved: jump of 2^32", 41, 41 + MaxVersionJump, nil},
		{"saved: xApp restart skips a block", 41, 41 + 101, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := New(Config{})
			tr.Restore(tt.restored, time.Time{})
			_, err := tr.Check(u(tt.version), t0)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Check(%d) = %v, want %v", tt.version, err, tt.wantErr)
			}
			if tt.wantErr != nil {
				// Refused, so the agent keeps its reference: the next
				// ordinary version still passes.
				if _, err := tr.Check(u(tt.restored+1), t0); err != nil {
					t.Fatalf("after the refused version, %d: %v", tt.restored+1, err)
				}
			}
		})
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

func TestSupersede(t *testing.T) {
	t0 := time.Unix(1_763_800_000, 0)
	tr := New(Config{})
	tr.Grant(3, t0.Add(time.Hour))
	tr.Supersede(4)
	if tr.Active() || tr.Version() != 4 {
		t.Fatalf("after Supersede: active %v version %d", tr.Active(), tr.Version())
	}
	if _, err := tr.Check(Update{Version: 4, IssuedAt: t0, Lease: time.Hour}, t0); !errors.Is(err, ErrReplay) {
		t.Fatalf("superseded version replayed: %v", err)
	}
}
