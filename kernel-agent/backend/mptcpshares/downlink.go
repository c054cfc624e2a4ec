package mptcpshares

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	vnl "github.com/vishvananda/netlink"

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
	keepUrgentCaps(caps, c.Paths, c.Classes, d.linkMbps)
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
