package backend_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/dryrun"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// TestOwn: a host's own backend takes a set of at most one device; an
// empty set leaves its kernel alone, and its errors are the set's.
func TestOwn(t *testing.T) {
	d := dryrun.New()
	b := backend.Own(d)
	if b.Name() != payload.BackendDryRun || b.Capabilities().MaxWeight != payload.MaxWeight {
		t.Fatalf("name %q caps %+v", b.Name(), b.Capabilities())
	}
	p := backend.Path{WAT: "nr", Interface: "nr0", Index: 2, Addr: netip.MustParseAddr("10.0.0.1"), Weight: 3}
	if na, err := b.ApplyAll(context.Background(), []backend.Device{{CPEID: "cpe-0001", Paths: []backend.Path{p}}}); err != nil || len(na) != 0 {
		t.Fatalf("ApplyAll = %v, %v", na, err)
	}
	if _, err := b.ApplyAll(context.Background(), nil); err != nil || len(d.Applied()) != 1 {
		t.Fatalf("an empty set: %v, %d applies", err, len(d.Applied()))
	}
	if _, err := b.ApplyAll(context.Background(), []backend.Device{{CPEID: "a"}, {CPEID: "b"}}); !errors.Is(err, backend.ErrOneDevice) {
		t.Fatalf("two devices: %v", err)
	}
	d.SetErr(errors.New("kernel says no"))
	if _, err := b.ApplyAll(context.Background(), []backend.Device{{CPEID: "cpe-0001", Paths: []backend.Path{p}}}); err == nil {
		t.Fatal("the kernel's refusal was lost")
	}
	if caps := b.(backend.CapsReporter).AppliedCaps("cpe-0001"); caps != nil {
		t.Fatalf("dry-run caps %v", caps)
	}
}

// rejoinLocal is a Local backend that checks the paths it put back.
type rejoinLocal struct {
	*dryrun.Backend
	asked time.Time
}

func (r *rejoinLocal) Rejoin(_ context.Context, now time.Time) (backend.RejoinReport, error) {
	r.asked = now
	return backend.RejoinReport{Readded: []string{"wifi"}, Next: now.Add(time.Second)}, nil
}

// TestOwnRejoin: a host's own backend hands the rejoin checks to a Local
// backend that has them; one without has nothing pending.
func TestOwnRejoin(t *testing.T) {
	now := time.Unix(1763800000, 0)
	l := &rejoinLocal{Backend: dryrun.New()}
	rep, err := backend.Own(l).(backend.Rejoiner).Rejoin(context.Background(), now)
	if err != nil || !l.asked.Equal(now) || !rep.Next.Equal(now.Add(time.Second)) || len(rep.Readded) != 1 {
		t.Fatalf("forwarded: %+v, %v (asked at %v)", rep, err, l.asked)
	}
	rep, err = backend.Own(dryrun.New()).(backend.Rejoiner).Rejoin(context.Background(), now)
	if err != nil || !rep.Next.IsZero() || rep.Readded != nil || rep.GaveUp != nil {
		t.Fatalf("without checks: %+v, %v", rep, err)
	}
}
