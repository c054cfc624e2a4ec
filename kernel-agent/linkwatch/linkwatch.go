// Package linkwatch follows the interfaces that carry the WATs through
// rtnetlink notifications (RTM_NEWLINK/DELLINK, RTM_NEWADDR/DELADDR,
// RTM_NEWROUTE/DELROUTE), so that the agent reacts to a link or address
// going away within milliseconds instead of waiting for the next weights
// update.
//
// # A link back before its route
//
// A link set down loses its routes, and `ip link set up` restores only the
// connected prefix's: whatever put the gateway route in (DHCP, networkd, a
// script) does so milliseconds to seconds later. A WAT reported usable at
// the link's return has its MPTCP endpoint added back at once, the path
// manager's one join from it finds no route and fails, and the subflow
// waits for the agent's re-adds (backend/mptcpupstream/rejoin.go): in the
// real-stack bench's lifi-blockage scenario, 0.5 or 1.5 s of a link that
// returns every 3-6 s. So an interface that had a gateway route when its
// link went away is usable again only once a gateway route through it is
// back, or RouteGrace after its link returned, whichever comes first (a
// route that does not come back leaves the WAT to the re-adds, as before).
// An interface that never had one (its peer on the link) is usable at its
// link's return. A carrier lost with the link administratively up keeps
// its routes, so nothing waits then.
package linkwatch

import (
	"net/netip"
	"slices"
	"time"
)

// RouteGrace bounds the wait for a returned link's gateway route.
const RouteGrace = 2 * time.Second

// Status is what the agent needs to know about one interface.
type Status struct {
	Interface string
	// Index is the interface index, 0 when the interface does not exist.
	Index int
	// LinkUp: administratively up and running (carrier, operstate up or
	// unknown).
	LinkUp bool
	// Addr is the interface's first IPv4 address (invalid when none).
	Addr netip.Addr
	// AwaitingRoute: the link is back, the gateway route it had is not
	// yet (see "A link back before its route"), for at most RouteGrace.
	AwaitingRoute bool
}

// Usable reports whether the WAT can carry traffic: link up with an IPv4
// address and not awaiting its route.
func (s Status) Usable() bool { return s.LinkUp && s.Addr.IsValid() && !s.AwaitingRoute }

// Flags from if.h, so the pure part of the package builds everywhere.
const (
	iffUp      = 0x1
	iffRunning = 0x40
)

// linkUp decides from the interface flags.
func linkUp(flags uint32) bool { return flags&iffUp != 0 && flags&iffRunning != 0 }

// table is the watcher's view of the watched interfaces; pure, so that
// event handling is tested without a kernel.
type table struct {
	byName  map[string]*entry
	byIndex map[int]*entry
}

type entry struct {
	name   string
	index  int
	linkUp bool
	addrs  []netip.Addr // IPv4, in order of arrival
	// gateway: a gateway route went through the interface when last
	// seen with its link up. IPv4 announces no route that a link's loss
	// removes, so it outlives the link's going down, as it must.
	gateway bool
	// awaitUntil: the link returned without the gateway route it had;
	// zero when nothing is awaited.
	awaitUntil time.Time
}

func newTable(ifaces []string) *table {
	t := &table{byName: map[string]*entry{}, byIndex: map[int]*entry{}}
	for _, n := range ifaces {
		t.byName[n] = &entry{name: n}
	}
	return t
}

func (e *entry) status() Status {
	s := Status{Interface: e.name, Index: e.index, LinkUp: e.linkUp, AwaitingRoute: !e.awaitUntil.IsZero()}
	if len(e.addrs) > 0 {
		s.Addr = e.addrs[0]
	}
	return s
}

// link applies a link message received at now; it returns the new status
// and whether the interface is watched. A link that returns starts the wait
// for its gateway route, which routes ends.
func (t *table) link(name string, index int, flags uint32, deleted bool, now time.Time) (Status, bool) {
	e, ok := t.byName[name]
	if !ok {
		// A rename away from a watched name arrives under the new name
		// with the old index.
		if old, ok := t.byIndex[index]; ok && old.name != name {
			delete(t.byIndex, index)
			old.reset()
			return old.status(), true
		}
		return Status{}, false
	}
	if deleted {
		delete(t.byIndex, e.index)
		e.reset()
		return e.status(), true
	}
	if e.index != index {
		delete(t.byIndex, e.index)
		e.reset()
		e.index = index
	}
	t.byIndex[index] = e
	up := linkUp(flags)
	switch {
	case up && !e.linkUp && e.gateway:
		e.awaitUntil = now.Add(RouteGrace)
	case !up:
		e.awaitUntil = time.Time{}
	}
	e.linkUp = up
	return e.status(), true
}

// reset forgets everything of an interface that went away or is another.
func (e *entry) reset() {
	e.index, e.linkUp, e.addrs, e.gateway, e.awaitUntil = 0, false, nil, false, time.Time{}
}

// routes applies what a listing of the routes through interface index
// found (after its link came up, or a route through it changed): whether
// a gateway route goes through it. Only a route found with the link up
// counts. None found forgets nothing: the link's loss may be announced
// after its routes' (separate notification groups), and a route removed
// by hand costs one RouteGrace at the link's next return, after which
// expire forgets it.
func (t *table) routes(index int, gateway bool) (Status, bool) {
	e, ok := t.byIndex[index]
	if !ok {
		return Status{}, false
	}
	if e.linkUp && gateway {
		e.gateway, e.awaitUntil = true, time.Time{}
	}
	return e.status(), true
}

// expire ends the waits for routes that RouteGrace ended by now, and
// forgets those routes, so the links' next returns wait for nothing; it
// returns the interfaces that changed.
func (t *table) expire(now time.Time) []Status {
	var out []Status
	for _, e := range t.byName {
		if !e.awaitUntil.IsZero() && !now.Before(e.awaitUntil) {
			e.gateway, e.awaitUntil = false, time.Time{}
			out = append(out, e.status())
		}
	}
	return out
}

// nextExpiry is when the first wait for a route ends; zero when none.
func (t *table) nextExpiry() time.Time {
	var next time.Time
	for _, e := range t.byName {
		if !e.awaitUntil.IsZero() && (next.IsZero() || e.awaitUntil.Before(next)) {
			next = e.awaitUntil
		}
	}
	return next
}

// watched reports whether index is a watched interface's.
func (t *table) watched(index int) bool { _, ok := t.byIndex[index]; return ok }

// addr applies an address message.
func (t *table) addr(index int, a netip.Addr, added bool) (Status, bool) {
	e, ok := t.byIndex[index]
	if !ok || !a.Is4() {
		return Status{}, false
	}
	i := slices.Index(e.addrs, a)
	switch {
	case added && i < 0:
		e.addrs = append(e.addrs, a)
	case !added && i >= 0:
		e.addrs = slices.Delete(e.addrs, i, i+1)
	}
	return e.status(), true
}

// snapshot returns every watched interface's status.
func (t *table) snapshot() map[string]Status {
	out := make(map[string]Status, len(t.byName))
	for n, e := range t.byName {
		out[n] = e.status()
	}
	return out
}
