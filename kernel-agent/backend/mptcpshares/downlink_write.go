package mptcpshares

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	vnl "github.com/vishvananda/netlink"
)

// removeStale deletes what the last apply wrote and is not wanted as it
// was: classifiers of (CPE, WAT) classes that no longer hold leaves, then
// leaves, then the filters and classes of (CPE, WAT) classes (gone,
// moved or renumbered, or with another address), and the root HTB of
// interfaces left without classes. Leaves go first: HTB refuses to delete
// a class that has children.
func (d *Downlink) removeStale(want map[classKey]class) error {
	keep := map[int]bool{}
	for _, cl := range want {
		keep[cl.ifindex] = true
	}
	var errs []error
	for k, old := range d.classes {
		if cl, ok := want[k]; old.inner && (!ok || !cl.inner || cl.minor != old.minor || cl.ifindex != old.ifindex) {
			if err := d.nl.ClassifierDel(old.ifindex, vnl.MakeHandle(1, old.minor), classifierPrio); err != nil && !isNotFound(err) {
				errs = append(errs, fmt.Errorf("remove classifier of %s/%s: %w", k.cpe, k.wat, err))
			}
		}
	}
	for _, leaves := range []bool{true, false} {
		for k, old := range d.classes {
			if old.leaf != leaves {
				continue
			}
			cl, ok := want[k]
			if ok && cl.minor == old.minor && sameSlot(cl, old) && cl.addr == old.addr {
				continue
			}
			if !old.leaf {
				if err := d.nl.FilterDel(filterDelFor(old)); err != nil && !isNotFound(err) {
					errs = append(errs, fmt.Errorf("remove filter %d of %s/%s: %w", old.minor, k.cpe, k.wat, err))
				}
				if ok && cl.minor == old.minor && sameSlot(cl, old) {
					continue // the class itself is replaced in place
				}
			}
			if !minorWanted(want, old) {
				if err := d.nl.ClassDel(classFor(old)); err != nil && !isNotFound(err) {
					errs = append(errs, fmt.Errorf("remove class 1:%x of %s/%s%s: %w", old.minor, k.cpe, k.wat, ruleSuffix(k), err))
				}
			}
		}
	}
	for idx := range d.roots {
		if keep[idx] {
			continue
		}
		link, err := d.nl.LinkByIndex(idx)
		if err != nil {
			delete(d.roots, idx) // the interface is gone, and its qdiscs with it
			continue
		}
		if d.hasDownlinkRoot(link) {
			if err := d.nl.QdiscDel(rootFor(idx)); err != nil && !isNotFound(err) {
				errs = append(errs, fmt.Errorf("remove root htb of %s: %w", link.Attrs().Name, err))
				continue
			}
		}
		delete(d.roots, idx)
	}
	return errors.Join(errs...)
}

// ruleSuffix names a leaf's rule in messages.
func ruleSuffix(k classKey) string {
	switch k.rule {
	case "":
		return ""
	case ruleDefault:
		return " (default rule)"
	}
	return " (class " + k.rule + ")"
}

// minorWanted tells whether another wanted class reuses old's minor in
// old's place (then ClassReplace rewrites it; deleting would race).
func minorWanted(want map[classKey]class, old class) bool {
	for _, cl := range want {
		if cl.minor == old.minor && sameSlot(cl, old) {
			return true
		}
	}
	return false
}

// write installs the root HTB where needed, every wanted class and
// filter ((CPE, WAT) classes before their leaves, classifiers after
// them), and reads them back; it returns per CPE the first failure.
func (d *Downlink) write(want map[classKey]class) map[string]error {
	failed := map[string]error{}
	fail := func(k classKey, err error) {
		if _, dup := failed[k.cpe]; !dup {
			failed[k.cpe] = fmt.Errorf("%s%s: %w", k.wat, ruleSuffix(k), err)
		}
	}
	byIf := map[int][]classKey{}
	for k, cl := range want {
		byIf[cl.ifindex] = append(byIf[cl.ifindex], k)
	}
	for idx, keys := range byIf {
		slices.SortFunc(keys, func(a, b classKey) int {
			return cmp.Or(cmp.Compare(boolInt(want[a].leaf), boolInt(want[b].leaf)), cmpKeys(a, b))
		})
		failAll := func(err error) {
			for _, k := range keys {
				fail(k, err)
			}
		}
		link, err := d.nl.LinkByIndex(idx)
		if err != nil {
			failAll(fmt.Errorf("link %d: %w", idx, err))
			continue
		}
		if !d.hasDownlinkRoot(link) {
			if err := d.nl.QdiscReplace(rootFor(idx)); err != nil {
				failAll(fmt.Errorf("root htb on %s: %w", link.Attrs().Name, err))
				continue
			}
		}
		d.roots[idx] = true
		have, err := d.nl.FilterList(link, rootHandle)
		if err != nil {
			failAll(fmt.Errorf("list filters on %s: %w", link.Attrs().Name, err))
			continue
		}
		for _, k := range keys {
			cl := want[k]
			if cl.leaf {
				if err := d.nl.ClassReplace(leafClassFor(cl)); err != nil {
					fail(k, fmt.Errorf("class 1:%x up to %d bit/s on %s: %w", cl.minor, cl.bps, link.Attrs().Name, err))
					continue
				}
				if err := d.nl.BfifoReplace(cl.ifindex, vnl.MakeHandle(1, cl.minor), leafHandle(cl.minor), queueBytes(cl.bps)); err != nil {
					fail(k, fmt.Errorf("leaf queue of 1:%x on %s: %w", cl.minor, link.Attrs().Name, err))
				}
				continue
			}
			if err := d.nl.ClassReplace(classFor(cl)); err != nil {
				fail(k, fmt.Errorf("class 1:%x at %d bit/s on %s: %w", cl.minor, cl.bps, link.Attrs().Name, err))
				continue
			}
			if !cl.inner {
				if err := d.nl.BfifoReplace(cl.ifindex, vnl.MakeHandle(1, cl.minor), leafHandle(cl.minor), queueBytes(cl.bps)); err != nil {
					fail(k, fmt.Errorf("leaf queue of 1:%x on %s: %w", cl.minor, link.Attrs().Name, err))
					continue
				}
			}
			if hasFilter(have, cl) {
				continue
			}
			// Whatever holds the preference (a filter of an earlier
			// class with the minor) goes first.
			if err := d.nl.FilterDel(filterDelFor(cl)); err != nil && !isNotFound(err) {
				fail(k, fmt.Errorf("clear filter %d on %s: %w", cl.minor, link.Attrs().Name, err))
				continue
			}
			if err := d.nl.FilterAdd(filterFor(cl)); err != nil {
				fail(k, fmt.Errorf("filter dst %s -> 1:%x on %s: %w", cl.addr, cl.minor, link.Attrs().Name, err))
			}
		}
		for _, k := range keys {
			if cl := want[k]; cl.inner {
				if err := setClassifier(d.nl, idx, vnl.MakeHandle(1, cl.minor), cl.prog); err != nil {
					fail(k, fmt.Errorf("on %s: %w", link.Attrs().Name, err))
				}
			}
		}
		d.verify(link, keys, want, fail)
	}
	return failed
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// verify reads the classes, filters and leaf queues of one interface
// back (classifiers are read back by setClassifier).
func (d *Downlink) verify(link vnl.Link, keys []classKey, want map[classKey]class, fail func(classKey, error)) {
	classes, cerr := d.nl.ClassList(link, rootHandle)
	filters, ferr := d.nl.FilterList(link, rootHandle)
	root := d.hasDownlinkRoot(link)
	for _, k := range keys {
		cl := want[k]
		switch {
		case cerr != nil || ferr != nil:
			fail(k, fmt.Errorf("verify: %w", errors.Join(cerr, ferr)))
		case !root:
			fail(k, fmt.Errorf("verify: root qdisc of %s is not the downlink's htb 1:", link.Attrs().Name))
		case cl.leaf:
			l := leaf{minor: cl.minor, ceil: cl.bps, urgent: cl.urgent}
			if !hasHTB(classes, vnl.MakeHandle(1, cl.minor), vnl.MakeHandle(1, cl.parentMinor), l.rate(), l.ceil, l.prio()) {
				fail(k, fmt.Errorf("verify: class 1:%x up to %d bit/s missing on %s", cl.minor, cl.bps, link.Attrs().Name))
			} else if err := checkLeaf(d.nl, cl.ifindex, cl.minor, cl.bps); err != nil {
				fail(k, err)
			}
		case !hasClass(classes, cl):
			fail(k, fmt.Errorf("verify: class 1:%x at %d bit/s missing on %s", cl.minor, cl.bps, link.Attrs().Name))
		case !hasFilter(filters, cl):
			fail(k, fmt.Errorf("verify: filter dst %s -> 1:%x missing on %s", cl.addr, cl.minor, link.Attrs().Name))
		case !cl.inner:
			if err := checkLeaf(d.nl, cl.ifindex, cl.minor, cl.bps); err != nil {
				fail(k, err)
			}
		}
	}
}

// hasDownlinkRoot tells whether link's root qdisc is the Downlink's HTB:
// handle 1:, no default class (unclassified traffic goes unshaped).
func (d *Downlink) hasDownlinkRoot(link vnl.Link) bool {
	qs, err := d.nl.QdiscList(link)
	if err != nil {
		return false
	}
	for _, q := range qs {
		if h, ok := q.(*vnl.Htb); ok && h.Parent == vnl.HANDLE_ROOT && h.Handle == rootHandle && h.Defcls == 0 {
			return true
		}
	}
	return false
}
