package mptcpshares

import (
	"context"
	"errors"
	"fmt"

	vnl "github.com/vishvananda/netlink"
	"golang.org/x/net/bpf"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpshares/classify"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// htbEnforcer caps each WAT interface's egress with a root HTB.
type htbEnforcer struct {
	nl      Netlink
	closeNL func() error
}

func (e *htbEnforcer) close() error { return e.closeNL() }

func (e *htbEnforcer) maxClasses() int { return payload.MaxClasses }

func (e *htbEnforcer) enforce(ctx context.Context, paths []backend.Path, caps map[string]uint64, classes []backend.Class) (map[string]float64, map[string]payload.AppliedClass, error) {
	var prog []bpf.RawInstruction
	minors := classMinors(len(classes))
	if len(classes) > 0 {
		var err error
		if prog, err = classifierOf(classify.Uplink, classes, defaultMinor, minors); err != nil {
			return nil, nil, err
		}
	}
	plans := map[string]watPlan{}
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		var err error
		if len(classes) == 0 {
			err = e.setCap(p, caps[p.WAT])
		} else {
			plans[p.WAT] = planWAT(p, caps[p.WAT], classes, defaultMinor, minors)
			err = e.setClasses(p, plans[p.WAT], prog)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s (%s): %w", p.WAT, p.Interface, err)
		}
	}
	return capsMbps(caps), reportClasses(classes, plans), nil
}

// Root HTBs of the backend on a CPE's WAT interface, told apart by their
// default class: one capped class (flat), or a parent with leaves per
// traffic class (classes; the default class is the default rule's leaf).
const (
	flatDefcls    = 1
	classesDefcls = defaultMinor
)

// setCap caps the path's interface at bps, or removes the backend's HTB
// when bps is 0 (the kernel's default root qdisc comes back; a root qdisc
// the backend did not make is left alone).
func (b *htbEnforcer) setCap(p backend.Path, bps uint64) error {
	link, err := b.nl.LinkByIndex(p.Index)
	if err != nil {
		return fmt.Errorf("link %d: %w", p.Index, err)
	}
	idx := link.Attrs().Index
	if bps == 0 {
		if b.ownRoot(link) == 0 {
			return nil
		}
		return b.removeRoot(link)
	}
	if b.ownRoot(link) == classesDefcls {
		// HTB cannot change its default class: the classes' tree goes.
		if err := b.removeRoot(link); err != nil {
			return err
		}
	}
	if !b.hasRoot(link) {
		q := vnl.NewHtb(vnl.QdiscAttrs{LinkIndex: idx, Handle: rootHandle, Parent: vnl.HANDLE_ROOT})
		q.Defcls = flatDefcls
		if err := b.nl.QdiscReplace(q); err != nil {
			return fmt.Errorf("root htb: %w", err)
		}
	}
	c := htbClass(vnl.ClassAttrs{LinkIndex: idx, Handle: classHandle, Parent: rootHandle}, bps)
	if err := b.nl.ClassReplace(c); err != nil {
		return fmt.Errorf("class 1:1 at %d bit/s: %w", bps, err)
	}
	classes, err := b.nl.ClassList(link, rootHandle)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	for _, got := range classes {
		h, ok := got.(*vnl.HtbClass)
		if !ok || h.Handle != classHandle {
			continue
		}
		if h.Rate != bps/8 || h.Ceil != bps/8 {
			return fmt.Errorf("verify: class 1:1 at %d/%d B/s, want %d", h.Rate, h.Ceil, bps/8)
		}
		if !b.hasRoot(link) {
			return errors.New("verify: root qdisc is not htb 1:")
		}
		return setLeaf(b.nl, idx, 1, bps)
	}
	return errors.New("verify: class 1:1 missing after apply")
}

// burstTime is how much of its rate a capped class may send at once. The
// library's default burst is one MTU (1600 bytes, under 1 ms at 14
// Mbit/s, less than one GSO segment): a sender the loaded 2-core machine
// delays by more loses that time for good. 10 ms of rate makes up for
// such delays and is short against the 100 ms windows the shares settle
// in. (It did not cure the under-filled 14 Mbit/s class of the caps_mbps
// case after the pacing test: 10.3 Mbit/s with the one-MTU burst, 10.4-10.5
// with this one.)
const burstTime = 0.010

// minBurstBytes keeps the burst above two full-size frames at low rates.
const minBurstBytes = 3200

// htbClass is an HTB class capped at bps (rate = ceil: no borrowing) with
// a burst of burstTime of its rate.
func htbClass(attrs vnl.ClassAttrs, bps uint64) *vnl.HtbClass {
	burst := burstBytes(bps)
	return vnl.NewHtbClass(attrs, vnl.HtbClassAttrs{Rate: bps, Ceil: bps, Buffer: burst, Cbuffer: burst})
}

// hasRoot tells whether the backend's flat HTB (default class 1) is the
// root qdisc of link; replacing it again would drop its queue.
func (b *htbEnforcer) hasRoot(link vnl.Link) bool { return b.ownRoot(link) == flatDefcls }

// ownRoot returns the default class of the backend's root HTB on link
// (flatDefcls or classesDefcls), 0 when the root is not the backend's.
func (b *htbEnforcer) ownRoot(link vnl.Link) uint32 {
	qs, err := b.nl.QdiscList(link)
	if err != nil {
		return 0
	}
	for _, q := range qs {
		if h, ok := q.(*vnl.Htb); ok && h.Parent == vnl.HANDLE_ROOT && h.Handle == rootHandle &&
			(h.Defcls == flatDefcls || h.Defcls == classesDefcls) {
			return h.Defcls
		}
	}
	return 0
}

// removeRoot deletes the backend's root HTB of link (the kernel's
// default root qdisc comes back) and checks that it is gone.
func (b *htbEnforcer) removeRoot(link vnl.Link) error {
	idx := link.Attrs().Index
	if err := b.nl.QdiscDel(vnl.NewHtb(vnl.QdiscAttrs{LinkIndex: idx, Handle: rootHandle, Parent: vnl.HANDLE_ROOT})); err != nil {
		return fmt.Errorf("remove root htb: %w", err)
	}
	if b.ownRoot(link) != 0 {
		return errors.New("verify: root htb still present after removal")
	}
	return nil
}

// setClasses gives the path's interface plan: the classes' root HTB
// (made afresh where the flat one or another root qdisc is), the parent
// class, the leaves with their bfifos, leaves of classes no longer there
// removed, and the classifier; then reads them back.
func (b *htbEnforcer) setClasses(p backend.Path, plan watPlan, prog []bpf.RawInstruction) error {
	link, err := b.nl.LinkByIndex(p.Index)
	if err != nil {
		return fmt.Errorf("link %d: %w", p.Index, err)
	}
	idx := link.Attrs().Index
	switch b.ownRoot(link) {
	case classesDefcls:
	case flatDefcls:
		if err := b.removeRoot(link); err != nil {
			return err
		}
		fallthrough
	default:
		q := vnl.NewHtb(vnl.QdiscAttrs{LinkIndex: idx, Handle: rootHandle, Parent: vnl.HANDLE_ROOT})
		q.Defcls = classesDefcls
		if err := b.nl.QdiscReplace(q); err != nil {
			return fmt.Errorf("root htb: %w", err)
		}
	}
	parent := vnl.MakeHandle(1, parentMinor)
	if err := b.nl.ClassReplace(htbParentClass(idx, parent, rootHandle, plan.parent)); err != nil {
		return fmt.Errorf("class 1:%x at %d bit/s: %w", parentMinor, plan.parent, err)
	}
	want := map[uint32]bool{parent: true}
	for _, l := range plan.leaves {
		if err := b.nl.ClassReplace(htbLeafClass(idx, parent, l)); err != nil {
			return fmt.Errorf("class 1:%x up to %d bit/s: %w", l.minor, l.ceil, err)
		}
		want[vnl.MakeHandle(1, l.minor)] = true
	}
	have, err := b.nl.ClassList(link, rootHandle)
	if err != nil {
		return fmt.Errorf("list classes: %w", err)
	}
	for _, c := range have {
		if h := c.Attrs().Handle; !want[h] {
			if err := b.nl.ClassDel(c); err != nil && !isNotFound(err) {
				return fmt.Errorf("remove class %x:%x: %w", h>>16, h&0xffff, err)
			}
		}
	}
	for _, l := range plan.leaves {
		if err := setLeaf(b.nl, idx, l.minor, l.ceil); err != nil {
			return err
		}
	}
	if err := setClassifier(b.nl, idx, rootHandle, prog); err != nil {
		return err
	}
	got, err := b.nl.ClassList(link, rootHandle)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	// A class at the top of the tree reads back with parent TC_H_ROOT.
	if !hasHTB(got, parent, vnl.HANDLE_ROOT, plan.parent, plan.parent, 0) {
		return fmt.Errorf("verify: class 1:%x at %d bit/s missing", parentMinor, plan.parent)
	}
	for _, l := range plan.leaves {
		if !hasHTB(got, vnl.MakeHandle(1, l.minor), parent, l.rate(), l.ceil, l.prio()) {
			return fmt.Errorf("verify: class 1:%x up to %d bit/s, priority %d, missing", l.minor, l.ceil, l.prio())
		}
	}
	if len(got) != len(want) {
		return fmt.Errorf("verify: %d classes, want %d", len(got), len(want))
	}
	if b.ownRoot(link) != classesDefcls {
		return errors.New("verify: root qdisc is not the classes' htb 1:")
	}
	return nil
}
