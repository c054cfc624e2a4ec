package linkwatch

import (
	"net/netip"
	"testing"
	"time"
)

func TestTable(t *testing.T) {
	a1 := netip.MustParseAddr("10.31.1.1")
	a2 := netip.MustParseAddr("10.31.1.9")
	tb := newTable([]string{"nr0", "wifi0"})
	t0 := time.Unix(1000, 0)
	type step struct {
		name   string
		do     func() (Status, bool)
		want   Status
		wantOK bool
	}
	steps := []step{
		{"unwatched link", func() (Status, bool) { return tb.link("eth9", 9, iffUp|iffRunning, false, t0) }, Status{}, false},
		{"link appears up", func() (Status, bool) { return tb.link("nr0", 3, iffUp|iffRunning, false, t0) }, Status{Interface: "nr0", Index: 3, LinkUp: true}, true},
		{"address added", func() (Status, bool) { return tb.addr(3, a1, true) }, Status{Interface: "nr0", Index: 3, LinkUp: true, Addr: a1}, true},
		{"second address", func() (Status, bool) { return tb.addr(3, a2, true) }, Status{Interface: "nr0", Index: 3, LinkUp: true, Addr: a1}, true},
		{"ipv6 ignored", func() (Status, bool) { return tb.addr(3, netip.MustParseAddr("fe80::1"), true) }, Status{}, false},
		{"admin down", func() (Status, bool) { return tb.link("nr0", 3, iffRunning, false, t0) }, Status{Interface: "nr0", Index: 3, Addr: a1}, true},
		{"no carrier", func() (Status, bool) { return tb.link("nr0", 3, iffUp, false, t0) }, Status{Interface: "nr0", Index: 3, Addr: a1}, true},
		{"up again", func() (Status, bool) { return tb.link("nr0", 3, iffUp|iffRunning, false, t0) }, Status{Interface: "nr0", Index: 3, LinkUp: true, Addr: a1}, true},
		{"first address removed", func() (Status, bool) { return tb.addr(3, a1, false) }, Status{Interface: "nr0", Index: 3, LinkUp: true, Addr: a2}, true},
		{"last address removed", func() (Status, bool) { return tb.addr(3, a2, false) }, Status{Interface: "nr0", Index: 3, LinkUp: true}, true},
		{"address on unknown index", func() (Status, bool) { return tb.addr(77, a1, true) }, Status{}, false},
		{"deleted", func() (Status, bool) { return tb.link("nr0", 3, 0, true, t0) }, Status{Interface: "nr0"}, true},
		{"recreated with new index", func() (Status, bool) { return tb.link("nr0", 12, iffUp|iffRunning, false, t0) }, Status{Interface: "nr0", Index: 12, LinkUp: true}, true},
		{"renamed away", func() (Status, bool) { return tb.link("old-nr", 12, iffUp|iffRunning, false, t0) }, Status{Interface: "nr0"}, true},
	}
	for _, s := range steps {
		got, ok := s.do()
		if ok != s.wantOK || got != s.want {
			t.Fatalf("%s: got %+v, %v; want %+v, %v", s.name, got, ok, s.want, s.wantOK)
		}
	}
	if !(Status{LinkUp: true, Addr: a1}).Usable() || (Status{LinkUp: true}).Usable() || (Status{Addr: a1}).Usable() {
		t.Fatal("Usable")
	}
}

// TestTableRoute: a link that returns without the gateway route it had is
// not usable until the route is back or RouteGrace has passed.
func TestTableRoute(t *testing.T) {
	a := netip.MustParseAddr("10.31.1.1")
	t0 := time.Unix(1000, 0)
	up, down := uint32(iffUp|iffRunning), uint32(iffUp)
	type step struct {
		name   string
		do     func(tb *table) Status
		usable bool
		await  bool
	}
	link := func(flags uint32, at time.Duration) func(*table) Status {
		return func(tb *table) Status { s, _ := tb.link("wifi0", 4, flags, false, t0.Add(at)); return s }
	}
	routes := func(gw bool) func(*table) Status {
		return func(tb *table) Status { s, _ := tb.routes(4, gw); return s }
	}
	expire := func(at time.Duration) func(*table) Status {
		return func(tb *table) Status {
			tb.expire(t0.Add(at))
			return tb.snapshot()["wifi0"]
		}
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"the route comes back", []step{
			{"up with its route", func(tb *table) Status { link(up, 0)(tb); return routes(true)(tb) }, true, false},
			{"link lost", link(down, time.Second), false, false},
			{"a route listed while down changes nothing", routes(true), false, false},
			{"link back, route not", link(up, 2*time.Second), false, true},
			{"listed: still none", routes(false), false, true},
			{"route back", routes(true), true, false},
		}},
		{"a carrier lost keeps the route", []step{
			{"up with its route", func(tb *table) Status { link(up, 0)(tb); return routes(true)(tb) }, true, false},
			{"carrier lost", link(down, time.Second), false, false},
			{"carrier back: the route was never gone", func(tb *table) Status { link(up, 2*time.Second)(tb); return routes(true)(tb) }, true, false},
		}},
		{"the route does not come back", []step{
			{"up with its route", func(tb *table) Status { link(up, 0)(tb); return routes(true)(tb) }, true, false},
			{"link lost", link(down, time.Second), false, false},
			{"link back, route not", func(tb *table) Status { link(up, 2*time.Second)(tb); return routes(false)(tb) }, false, true},
			{"before the grace ends", expire(2*time.Second + RouteGrace - time.Millisecond), false, true},
			{"grace over", expire(2*time.Second + RouteGrace), true, false},
			{"lost again", link(down, 10*time.Second), false, false},
			{"back: no route to wait for any more", link(up, 11*time.Second), true, false},
		}},
		{"a peer on the link: never a gateway route", []step{
			{"up", func(tb *table) Status { link(up, 0)(tb); return routes(false)(tb) }, true, false},
			{"link lost", link(down, time.Second), false, false},
			{"link back", link(up, 2*time.Second), true, false},
		}},
		{"lost again while waiting", []step{
			{"up with its route", func(tb *table) Status { link(up, 0)(tb); return routes(true)(tb) }, true, false},
			{"link lost", link(down, time.Second), false, false},
			{"link back, route not", link(up, 2*time.Second), false, true},
			{"lost again", link(down, 2500*time.Millisecond), false, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable([]string{"wifi0"})
			tb.link("wifi0", 4, 0, false, t0)
			tb.addr(4, a, true)
			for _, st := range tc.steps {
				s := st.do(tb)
				if s.Usable() != st.usable || s.AwaitingRoute != st.await {
					t.Fatalf("%s: %+v: usable %v awaiting %v, want %v %v", st.name, s, s.Usable(), s.AwaitingRoute, st.usable, st.await)
				}
				if next := tb.nextExpiry(); next.IsZero() == st.await {
					t.Fatalf("%s: next expiry %v with awaiting %v", st.name, next, st.await)
				}
			}
		})
	}
}
