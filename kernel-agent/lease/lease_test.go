package lease

import (
	"errors"
	"testing"
	"time"
)

func TestTracker(t *testing.T) {
	t0 := time.Unix(1_763_800_000, 0)
	var tr Tracker
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
	}
	for _, s := range steps {
		err := tr.Check(s.version)
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
			t.Fatalf("%s: Check(%d) = %v, want %v", s.name, s.version, err, s.wantErr)
		}
		if err == nil {
			tr.Grant(s.version, 2.5, t0)
		}
	}
	if tr.Version() != 9 {
		t.Fatalf("Version = %d", tr.Version())
	}
	if got := tr.Remaining(t0.Add(time.Second)); got != 1500*time.Millisecond {
		t.Fatalf("Remaining = %v", got)
	}
	if got := tr.Remaining(t0.Add(3 * time.Second)); got != 0 {
		t.Fatalf("Remaining after the end = %v", got)
	}
	tr.Expire()
	if tr.Active() || !tr.Until().IsZero() || tr.Check(9) == nil {
		t.Fatal("after Expire the lease must be gone and the version still blocked")
	}
	var r Tracker
	r.Restore(7, time.Time{})
	if r.Active() || r.Check(7) == nil || r.Check(8) != nil {
		t.Fatal("Restore without lease")
	}
}
