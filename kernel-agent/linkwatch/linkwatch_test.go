package linkwatch

import (
	"net/netip"
	"testing"
)

func TestTable(t *testing.T) {
	a1 := netip.MustParseAddr("10.31.1.1")
	a2 := netip.MustParseAddr("10.31.1.9")
	tb := newTable([]string{"nr0", "wifi0"})
	type step struct {
		name   string
		do     func() (Status, bool)
		want   Status
		wantOK bool
	}
	steps := []step{
		{"unwatched link", func() (Status, bool) { return tb.link("eth9", 9, iffUp|iffRunning, false) }, Status{}, false},
		{"link appears up", func() (Status, bool) { return tb.link("nr0", 3, iffUp|iffRunning, false) }, Status{Interface: "nr0", Index: 3, LinkUp: true}, true},
		{"address added", func() (Status, bool) { return tb.addr(3, a1, true) }, Status{Interface: "nr0", Index: 3, LinkUp: true, Addr: a1}, true},
		{"second address", func() (Status, bool) { return tb.addr(3, a2, true) }, Status{Interface: "nr0", Index: 3, LinkUp: true, Addr: a1}, true},
		{"ipv6 ignored", func() (Status, bool) { return tb.addr(3, netip.MustParseAddr("fe80::1"), true) }, Status{}, false},
		{"admin down", func() (Status, bool) { return tb.link("nr0", 3, iffRunning, false) }, Status{Interface: "nr0", Index: 3, Addr: a1}, true},
		{"no carrier", func() (Status, bool) { return tb.link("nr0", 3, iffUp, false) }, Status{Interface: "nr0", Index: 3, Addr: a1}, true},
		{"up again", func() (Status, bool) { return tb.link("nr0", 3, iffUp|iffRunning, false) }, Status{Interface: "nr0", Index: 3, LinkUp: true, Addr: a1}, true},
		{"first address removed", func() (Status, bool) { return tb.addr(3, a1, false) }, Status{Interface: "nr0", Index: 3, LinkUp: true, Addr: a2}, true},
		{"last address removed", func() (Status, bool) { return tb.addr(3, a2, false) }, Status{Interface: "nr0", Index: 3, LinkUp: true}, true},
		{"address on unknown index", func() (Status, bool) { return tb.addr(77, a1, true) }, Status{}, false},
		{"deleted", func() (Status, bool) { return tb.link("nr0", 3, 0, true) }, Status{Interface: "nr0"}, true},
		{"recreated with new index", func() (Status, bool) { return tb.link("nr0", 12, iffUp|iffRunning, false) }, Status{Interface: "nr0", Index: 12, LinkUp: true}, true},
		{"renamed away", func() (Status, bool) { return tb.link("old-nr", 12, iffUp|iffRunning, false) }, Status{Interface: "nr0"}, true},
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
