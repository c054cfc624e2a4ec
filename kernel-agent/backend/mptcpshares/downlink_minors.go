package mptcpshares

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"

	"golang.org/x/net/bpf"
)

// classKey names a rate class: a (CPE, WAT) class (rule ""), or a leaf
// under it: the default rule's (ruleDefault) or a traffic class's (its
// name).
type classKey struct{ cpe, wat, rule string }

// ruleDefault names the default rule's leaf (no class name starts with a
// dot).
const ruleDefault = "."

// class is one rate class: its minor (for a (CPE, WAT) class also its
// filter's preference) and interface. A (CPE, WAT) class has the CPE
// address it matches and its cap (rate = ceil), and when the CPE has
// traffic classes (inner) the classifier of its leaves; a leaf has its
// ceiling, its parent's minor and its urgency.
type class struct {
	minor   uint16
	ifindex int
	addr    netip.Addr
	bps     uint64

	inner bool
	prog  []bpf.RawInstruction

	leaf        bool
	parentMinor uint16
	urgent      bool
}

// sameSlot tells whether b can be a rewrite of a in place: the same
// interface and place in the tree (HTB does not move a class).
func sameSlot(a, b class) bool {
	return a.ifindex == b.ifindex && a.leaf == b.leaf && a.parentMinor == b.parentMinor
}

// parentKey is the (CPE, WAT) class of k.
func (k classKey) parentKey() classKey { return classKey{k.cpe, k.wat, ""} }

// cmpKeys orders keys by CPE, WAT, then the (CPE, WAT) class before its
// leaves.
func cmpKeys(a, b classKey) int {
	return cmp.Or(cmp.Compare(a.cpe, b.cpe), cmp.Compare(a.wat, b.wat), cmp.Compare(a.rule, b.rule))
}

// number gives every wanted class a minor: the one it had when its
// interface is the same (no churn of filters) and, for a leaf, its
// (CPE, WAT) class kept its minor too, else the lowest free one.
func (d *Downlink) number(want map[classKey]class) {
	used := map[uint16]bool{}
	keys := slices.SortedFunc(maps.Keys(want), cmpKeys)
	for _, k := range keys {
		cl := want[k]
		old, ok := d.classes[k]
		if !ok || old.ifindex != cl.ifindex || old.leaf != cl.leaf || used[old.minor] {
			continue
		}
		if cl.leaf && want[k.parentKey()].minor != old.parentMinor {
			continue // keys sort the (CPE, WAT) class before its leaves
		}
		cl.minor = old.minor
		want[k] = cl
		used[old.minor] = true
	}
	next := uint16(2)
	for _, k := range keys {
		if want[k].minor != 0 {
			continue
		}
		for used[next] {
			next++
		}
		cl := want[k]
		cl.minor = next
		want[k] = cl
		used[next] = true
	}
}
