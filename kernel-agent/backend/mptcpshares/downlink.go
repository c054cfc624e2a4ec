package mptcpshares

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"

	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpshares/classify"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// DefaultMaxClasses bounds the rate classes a proxy's Downlink writes (one
// per capped WAT of each served CPE; with traffic classes, one per WAT
// with an address and under it one leaf for the default rule and one per
// class): HTB walks its classes per dequeue and u32 its filters per
// packet, so the bound keeps both linear costs known. A CPE whose classes
// would pass the bound is not applied.
const DefaultMaxClasses = 4096

// maxMinor is the largest class minor (and filter preference) a handle
// carries: both are 16 bits; minor 1 is left free (the CPE backend's
// class number) and 0 is no class.
const maxMinor = 0xffff

// DownlinkNetlink is what the Downlink needs of a netlink handle in the
// proxy's namespace: qdiscs, classes and filters on the egress interfaces
// and the route to each CPE address.
type DownlinkNetlink interface {
	Netlink
	ClassDel(class vnl.Class) error
	FilterAdd(filter vnl.Filter) error
	FilterDel(filter vnl.Filter) error
	FilterList(link vnl.Link, parent uint32) ([]vnl.Filter, error)
	RouteGet(destination net.IP) ([]vnl.Route, error)
}

// OnOff is the on/off half of a proxy's downlink: weight 0 flags the WAT's
// subflows backup (mptcpupstream.Downlink) and Watch flags new subflows.
type OnOff interface {
	backend.Backend
	Watch(ctx context.Context, beat func()) error
}

// DownlinkConfig configures a Downlink.
type DownlinkConfig struct {
	// NL manages the egress qdiscs in the proxy's namespace. Required
	// unless Pacer is set.
	NL DownlinkNetlink
	// Pacer, when set, enforces the caps instead of HTB classes: each
	// capped (CPE, WAT)'s cap paces the proxy's sockets whose remote
	// address is that WAT's CPE address (a pacing.Pacer keyed on
	// RemoteAddr). The Downlink closes it. MaxClasses then bounds the
	// capped addresses (pacing.MaxAddrs at most).
	Pacer Pacer
	// OnOff flags WATs at weight 0 backup (reused, not copied: the
	// mptcp-upstream downlink). Required.
	OnOff OnOff
	// LinkMbps is the link rate per WAT, the same for every served CPE:
	// caps are derived from it when a CPE's dl set carries no caps_mbps.
	LinkMbps map[string]float64
	// MaxClasses bounds the rate classes; 0 means DefaultMaxClasses.
	MaxClasses int
	// Close releases NL.
	Close func() error
}

// Downlink caps each served CPE's downlink per WAT at the proxy: one HTB
// class per capped (CPE, WAT), with a bfifo of 100 ms of its cap under
// it (queueTime), on the egress interface of the route to
// that WAT's CPE address, with a u32 filter on the address as destination
// (the subflow's remote address, what the proxy tells WATs by). Traffic
// that matches no filter bypasses the classes (HTB's direct queue: no
// default class), so other CPEs and other traffic are not shaped. A WAT at
// weight 0 is uncapped and flagged backup by OnOff. It is safe for one
// ApplyAll caller and one Watch goroutine at a time (Watch is OnOff's).
//
// A CPE with traffic classes gets a (CPE, WAT) class on every WAT with an
// address (at the WAT's cap, or unlimitedBps), holding the leaves of the
// CPE's default rule and classes as on a CPE (see classes.go), and a
// classifier on that class that matches the classes on the packets the
// u32 filter sent there (the remote end is the packet's source).
type Downlink struct {
	nl       DownlinkNetlink
	onoff    OnOff
	linkMbps map[string]float64
	max      int
	close    func() error

	// classes are the rate classes the kernel holds by this Downlink's
	// last ApplyAll (failed ones too, so that the next one removes them).
	classes map[classKey]class
	// roots are the interfaces whose root HTB this Downlink installed.
	roots map[int]bool
	// applied are the caps per CPE the last ApplyAll set and read back.
	applied map[string]map[string]float64
	// overflow counts CPEs left out for the class bound.
	overflow int

	// appliedCls are what the last ApplyAll set per class of each CPE.
	appliedCls map[string]map[string]payload.AppliedClass

	// pacer enforces the caps when set (then nl is unused); paced are
	// the addresses it capped.
	pacer Pacer
	paced map[netip.Addr]bool
}

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

var _ backend.Backend = (*Downlink)(nil)

// NewDownlink returns a Downlink; it does not touch the kernel.
func NewDownlink(cfg DownlinkConfig) (*Downlink, error) {
	if (cfg.NL == nil && cfg.Pacer == nil) || cfg.OnOff == nil {
		return nil, errors.New("mptcp-shares downlink: NL (or Pacer) and OnOff are required")
	}
	for wat, r := range cfg.LinkMbps {
		if !(r > 0) || r > MaxLinkMbps {
			return nil, fmt.Errorf("mptcp-shares downlink: link rate of %s %v Mbit/s: want (0, %d]", wat, r, MaxLinkMbps)
		}
	}
	max := cfg.MaxClasses
	if max == 0 {
		max = DefaultMaxClasses
	}
	if max < 1 || max > maxMinor-1 {
		return nil, fmt.Errorf("mptcp-shares downlink: max classes %d: want 1..%d", max, maxMinor-1)
	}
	closeNL := cfg.Close
	if closeNL == nil {
		closeNL = func() error { return nil }
	}
	return &Downlink{nl: cfg.NL, onoff: cfg.OnOff, linkMbps: cfg.LinkMbps, max: max, close: closeNL,
		classes: map[classKey]class{}, roots: map[int]bool{}, applied: map[string]map[string]float64{},
		appliedCls: map[string]map[string]payload.AppliedClass{}, pacer: cfg.Pacer, paced: map[netip.Addr]bool{}}, nil
}

// Name implements backend.Backend.
func (*Downlink) Name() string { return payload.BackendMPTCPShares }

// Capabilities implements backend.Backend: integer weights enforced as
// rate caps, coupled to the uplink through the backup flag of weight 0;
// traffic classes with HTB (a pacing cap is per address).
func (d *Downlink) Capabilities() payload.Capabilities {
	c := payload.Capabilities{MaxWeight: payload.MaxWeight, DirectionsCoupled: true, Semantics: payload.SemanticsRateCaps}
	if d.pacer == nil {
		c.MaxClasses = payload.MaxClasses
	}
	return c
}

// CheckClasses implements backend.ClassChecker: the classifier must be
// able to express the classes.
func (*Downlink) CheckClasses(classes []payload.Class) error {
	return checkClasses(classify.Downlink, classes, nil)
}

// AppliedClasses implements backend.ClassReporter.
func (d *Downlink) AppliedClasses(cpeID string) map[string]payload.AppliedClass {
	return d.appliedCls[cpeID]
}

// Watch flags new subflows of WATs at weight 0 (OnOff's watcher).
func (d *Downlink) Watch(ctx context.Context, beat func()) error { return d.onoff.Watch(ctx, beat) }

// Close closes OnOff's sockets, the netlink handle and the pacer (which
// detaches its program). The classes stay: a restarted agent's first
// ApplyAll replaces them.
func (d *Downlink) Close() error {
	var perr error
	if d.pacer != nil {
		perr = d.pacer.Close()
	}
	return errors.Join(d.onoff.Close(), d.close(), perr)
}

// AppliedCaps implements backend.CapsReporter.
func (d *Downlink) AppliedCaps(cpeID string) map[string]float64 { return d.applied[cpeID] }

// Rules implements backend.RuleCounter: rate classes in use and the bound.
func (d *Downlink) Rules() (used, limit int) { return len(d.classes), d.max }

// OverflowCPEs counts the CPEs the last ApplyAll left out for the bound.
func (d *Downlink) OverflowCPEs() int { return d.overflow }

// ApplyAll implements backend.Backend: backup flags first (OnOff; a WAT
// a traffic class uses is not backup), then per CPE in id order its caps
// (CapsBps of its dl paths), classes for the capped WATs (every WAT with
// an address for a CPE with traffic classes, with their leaves and
// classifier), removal of the classes no CPE wants any more, and a read
// back of every class, filter and classifier. A CPE is not applied when
// OnOff could not flag it, its caps cannot be computed, its address has
// no route, its classes would pass the bound or do not read back.
func (d *Downlink) ApplyAll(ctx context.Context, cpes []backend.Device) (map[string]error, error) {
	flags := make([]backend.Device, len(cpes))
	for i, c := range cpes {
		flags[i] = backend.Device{CPEID: c.CPEID, Paths: onOffPaths(c.Paths, c.Classes)}
	}
	notApplied, err := d.onoff.ApplyAll(ctx, flags)
	if err != nil {
		return nil, fmt.Errorf("mptcp-shares downlink: %w", err)
	}
	if notApplied == nil {
		notApplied = map[string]error{}
	}
	sorted := slices.SortedFunc(slices.Values(cpes), func(a, b backend.Device) int { return cmp.Compare(a.CPEID, b.CPEID) })
	want := map[classKey]class{}
	caps := map[string]map[string]float64{}
	withClasses := map[string][]backend.Class{}
	routes := map[netip.Addr]int{}
	overflow := 0
	for _, c := range sorted {
		if _, refused := notApplied[c.CPEID]; refused {
			continue
		}
		mine, err := d.classesOf(c, routes)
		if err != nil {
			notApplied[c.CPEID] = err
			continue
		}
		if len(want)+len(mine) > d.max {
			notApplied[c.CPEID] = fmt.Errorf("%d rate classes would pass the bound of %d", len(mine), d.max)
			overflow++
			continue
		}
		byWAT := map[string]float64{}
		for k, cl := range mine {
			want[k] = cl
			if k.rule == "" && cl.bps < unlimitedBps {
				byWAT[k.wat] = float64(cl.bps) / 1e6
			}
		}
		caps[c.CPEID] = byWAT
		if len(c.Classes) > 0 {
			withClasses[c.CPEID] = c.Classes
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mptcp-shares downlink: %w", err)
	}
	if d.pacer != nil {
		failed, read, err := d.pace(want)
		if err != nil {
			return nil, fmt.Errorf("mptcp-shares downlink: pacing: %w", err)
		}
		for k, mbps := range read {
			caps[k.cpe][k.wat] = mbps // what the pacer's map holds
		}
		d.finish(want, caps, nil, failed, notApplied, overflow)
		return notApplied, nil
	}
	d.number(want)
	failed := d.program(want, withClasses)
	if err := d.removeStale(want); err != nil {
		return nil, fmt.Errorf("mptcp-shares downlink: %w", err)
	}
	for cpe, err := range d.write(want) {
		if _, dup := failed[cpe]; !dup {
			failed[cpe] = err
		}
	}
	d.finish(want, caps, withClasses, failed, notApplied, overflow)
	return notApplied, nil
}

// finish records what an ApplyAll left in force: the classes, the
// failures among the CPEs not applied, the caps and traffic classes of
// the others.
func (d *Downlink) finish(want map[classKey]class, caps map[string]map[string]float64, withClasses map[string][]backend.Class,
	failed, notApplied map[string]error, overflow int) {
	d.classes = want
	for cpe, err := range failed {
		notApplied[cpe] = err
	}
	d.applied = map[string]map[string]float64{}
	for cpe, byWAT := range caps {
		if _, refused := notApplied[cpe]; !refused && len(byWAT) > 0 {
			d.applied[cpe] = byWAT
		}
	}
	d.appliedCls = map[string]map[string]payload.AppliedClass{}
	for cpe, cls := range withClasses {
		if _, refused := notApplied[cpe]; refused {
			continue
		}
		out := map[string]payload.AppliedClass{}
		for _, c := range cls {
			ac := payload.AppliedClass{Urgent: c.Urgent}
			for k, l := range want {
				if k.cpe == cpe && k.rule == c.Name && l.bps < unlimitedBps {
					if ac.CapsMbps == nil {
						ac.CapsMbps = map[string]float64{}
					}
					ac.CapsMbps[k.wat] = float64(l.bps) / 1e6
				}
			}
			out[c.Name] = ac
		}
		d.appliedCls[cpe] = out
	}
	d.overflow = overflow
}

// classesOf returns the classes CPE c needs (minors not yet assigned): a
// (CPE, WAT) class per capped WAT, or with traffic classes per WAT with an
// address, with its leaves.
func (d *Downlink) classesOf(c backend.Device, routes map[netip.Addr]int) (map[classKey]class, error) {
	caps, err := CapsBps(c.Paths, d.linkMbps)
	if err != nil {
		return nil, err
	}
	if len(c.Classes) > 0 {
		if d.pacer != nil {
			return nil, fmt.Errorf("%d traffic classes: %w", len(c.Classes), backend.ErrNoClasses)
		}
		// The program's length and keys do not depend on the minors.
		if _, err := classifierOf(classify.Downlink, c.Classes, defaultMinor, classMinors(len(c.Classes))); err != nil {
			return nil, err
		}
	}
	out := map[classKey]class{}
	for _, p := range c.Paths {
		bps := caps[p.WAT]
		if (bps == 0 && len(c.Classes) == 0) || !p.Addr.IsValid() {
			continue
		}
		a := p.Addr.Unmap()
		if d.pacer != nil {
			// Pacing keys on the address alone: no interface to find.
			out[classKey{c.CPEID, p.WAT, ""}] = class{addr: a, bps: bps}
			continue
		}
		idx, ok := routes[a]
		if !ok {
			rs, err := d.nl.RouteGet(a.AsSlice())
			if err != nil || len(rs) == 0 || rs[0].LinkIndex <= 0 {
				return nil, fmt.Errorf("%s address %s: no route to it (%v)", p.WAT, a, err)
			}
			idx = rs[0].LinkIndex
			routes[a] = idx
		}
		top := class{ifindex: idx, addr: a, bps: bps}
		if len(c.Classes) > 0 {
			plan := planWAT(p, bps, c.Classes, 0, make([]uint16, len(c.Classes)))
			top.bps, top.inner = plan.parent, true
			out[classKey{c.CPEID, p.WAT, ruleDefault}] = class{ifindex: idx, bps: plan.leaves[0].ceil, leaf: true}
			for i, cl := range c.Classes {
				l := plan.leaves[i+1]
				out[classKey{c.CPEID, p.WAT, cl.Name}] = class{ifindex: idx, bps: l.ceil, leaf: true, urgent: l.urgent}
			}
		}
		out[classKey{c.CPEID, p.WAT, ""}] = top
	}
	return out, nil
}

// program sets the leaves' parent minors and writes the classifier of
// every inner (CPE, WAT) class; it returns per CPE a failure.
func (d *Downlink) program(want map[classKey]class, withClasses map[string][]backend.Class) map[string]error {
	failed := map[string]error{}
	for k, cl := range want {
		if cl.leaf {
			cl.parentMinor = want[k.parentKey()].minor
			want[k] = cl
		}
	}
	for k, cl := range want {
		if !cl.inner {
			continue
		}
		cls := withClasses[k.cpe]
		minors := make([]uint16, len(cls))
		for i, c := range cls {
			minors[i] = want[classKey{k.cpe, k.wat, c.Name}].minor
		}
		prog, err := classifierOf(classify.Downlink, cls, want[classKey{k.cpe, k.wat, ruleDefault}].minor, minors)
		if err != nil {
			failed[k.cpe] = fmt.Errorf("%s: %w", k.wat, err)
			continue
		}
		cl.prog = prog
		want[k] = cl
	}
	return failed
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

// rootFor is the Downlink's root qdisc on interface idx: HTB 1: without a
// default class, so packets no filter claims take HTB's direct queue.
func rootFor(idx int) *vnl.Htb {
	q := vnl.NewHtb(vnl.QdiscAttrs{LinkIndex: idx, Handle: rootHandle, Parent: vnl.HANDLE_ROOT})
	q.Defcls = 0
	return q
}

// classFor is cl's HTB class: rate and ceil at the cap, so it never
// borrows (there is no parent class to borrow from); a leaf's under its
// (CPE, WAT) class (leafClassFor).
func classFor(cl class) *vnl.HtbClass {
	if cl.leaf {
		return leafClassFor(cl)
	}
	if cl.inner {
		return htbParentClass(cl.ifindex, vnl.MakeHandle(1, cl.minor), rootHandle, cl.bps)
	}
	return htbClass(vnl.ClassAttrs{LinkIndex: cl.ifindex, Handle: vnl.MakeHandle(1, cl.minor), Parent: rootHandle}, cl.bps)
}

// leafClassFor is a leaf's HTB class (see htbLeafClass).
func leafClassFor(cl class) *vnl.HtbClass {
	return htbLeafClass(cl.ifindex, vnl.MakeHandle(1, cl.parentMinor), leaf{minor: cl.minor, ceil: cl.bps, urgent: cl.urgent})
}

// ethProto is the filter protocol for addr's family.
func ethProto(addr netip.Addr) uint16 {
	if addr.Is4() {
		return unix.ETH_P_IP
	}
	return unix.ETH_P_IPV6
}

// filterFor is cl's u32 filter at preference cl.minor: the IPv4
// destination (offset 16 of the IP header) or the four words of the IPv6
// destination (offsets 24-36) equal to cl.addr send to class 1:minor.
func filterFor(cl class) *vnl.U32 {
	var keys []nl.TcU32Key
	if cl.addr.Is4() {
		a := cl.addr.As4()
		keys = []nl.TcU32Key{{Mask: 0xffffffff, Val: binary.BigEndian.Uint32(a[:]), Off: 16}}
	} else {
		a := cl.addr.As16()
		for i := range 4 {
			keys = append(keys, nl.TcU32Key{Mask: 0xffffffff, Val: binary.BigEndian.Uint32(a[4*i:]), Off: int32(24 + 4*i)})
		}
	}
	return &vnl.U32{
		FilterAttrs: vnl.FilterAttrs{LinkIndex: cl.ifindex, Parent: rootHandle, Priority: cl.minor, Protocol: ethProto(cl.addr)},
		ClassId:     vnl.MakeHandle(1, cl.minor),
		Sel:         &nl.TcU32Sel{Flags: nl.TC_U32_TERMINAL, Keys: keys},
	}
}

// filterDelFor names the whole preference cl.minor (handle 0), which
// removes cl's filter with its hash table.
func filterDelFor(cl class) *vnl.U32 {
	return &vnl.U32{FilterAttrs: vnl.FilterAttrs{LinkIndex: cl.ifindex, Parent: rootHandle, Priority: cl.minor, Protocol: ethProto(cl.addr)}}
}

// hasClass tells whether classes holds cl at its cap.
func hasClass(classes []vnl.Class, cl class) bool {
	for _, c := range classes {
		if h, ok := c.(*vnl.HtbClass); ok && h.Handle == vnl.MakeHandle(1, cl.minor) {
			return h.Rate == cl.bps/8 && h.Ceil == cl.bps/8
		}
	}
	return false
}

// hasFilter tells whether filters holds cl's filter: its preference,
// protocol, class and keys.
func hasFilter(filters []vnl.Filter, cl class) bool {
	want := filterFor(cl)
	for _, f := range filters {
		u, ok := f.(*vnl.U32)
		if !ok || u.Priority != cl.minor || u.ClassId != want.ClassId || u.Sel == nil || u.Protocol != want.Protocol {
			continue
		}
		if len(u.Sel.Keys) != len(want.Sel.Keys) {
			continue
		}
		same := true
		for i, k := range want.Sel.Keys {
			g := u.Sel.Keys[i]
			same = same && g.Mask == k.Mask && g.Val == k.Val && g.Off == k.Off
		}
		if same {
			return true
		}
	}
	return false
}

// isNotFound tells a delete of something already gone.
func isNotFound(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV)
}
