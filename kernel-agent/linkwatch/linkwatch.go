// Package linkwatch follows the interfaces that carry the WATs through
// rtnetlink notifications (RTM_NEWLINK/DELLINK, RTM_NEWADDR/DELADDR), so
// that the agent reacts to a link or address going away within
// milliseconds instead of waiting for the next weights update.
package linkwatch

import (
	"net/netip"
	"slices"
)

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
}

// Usable reports whether the WAT can carry traffic: link up with an IPv4
// address.
func (s Status) Usable() bool { return s.LinkUp && s.Addr.IsValid() }

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
}

func newTable(ifaces []string) *table {
	t := &table{byName: map[string]*entry{}, byIndex: map[int]*entry{}}
	for _, n := range ifaces {
		t.byName[n] = &entry{name: n}
	}
	return t
}

func (e *entry) status() Status {
	s := Status{Interface: e.name, Index: e.index, LinkUp: e.linkUp}
	if len(e.addrs) > 0 {
		s.Addr = e.addrs[0]
	}
	return s
}

// link applies a link message; it returns the new status and whether the
// interface is watched.
func (t *table) link(name string, index int, flags uint32, deleted bool) (Status, bool) {
	e, ok := t.byName[name]
	if !ok {
		// A rename away from a watched name arrives under the new name
		// with the old index.
		if old, ok := t.byIndex[index]; ok && old.name != name {
			delete(t.byIndex, index)
			old.index, old.linkUp, old.addrs = 0, false, nil
			return old.status(), true
		}
		return Status{}, false
	}
	if deleted {
		delete(t.byIndex, e.index)
		e.index, e.linkUp, e.addrs = 0, false, nil
		return e.status(), true
	}
	if e.index != index {
		delete(t.byIndex, e.index)
		e.index = index
		e.addrs = nil
	}
	t.byIndex[index] = e
	e.linkUp = linkUp(flags)
	return e.status(), true
}

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
