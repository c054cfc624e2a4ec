package mptcpshares

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// DefaultMaxClasses bounds the rate classes a proxy's Downlink writes (one
// per capped WAT of each served CPE): HTB walks its classes per dequeue
// and u32 its filters per packet, so the bound keeps both linear costs
// known. A CPE whose classes would pass the bound is not applied.
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

	// pacer enforces the caps when set (then nl is unused); paced are
	// the addresses it capped.
	pacer Pacer
	paced map[netip.Addr]bool
}

type classKey struct{ cpe, wat string }

// class is one (CPE, WAT) rate class: its minor (also its filter's
// preference), interface, the CPE address it matches and the cap.
type class struct {
	minor   uint16
	ifindex int
	addr    netip.Addr
	bps     uint64
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
		pacer: cfg.Pacer, paced: map[netip.Addr]bool{}}, nil
}

// Name implements backend.Backend.
func (*Downlink) Name() string { return payload.BackendMPTCPShares }

// Capabilities implements backend.Backend: integer weights enforced as
// rate caps, coupled to the uplink through the backup flag of weight 0.
func (*Downlink) Capabilities() payload.Capabilities {
	return payload.Capabilities{MaxWeight: payload.MaxWeight, DirectionsCoupled: true, Semantics: payload.SemanticsRateCaps}
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

// ApplyAll implements backend.Backend: backup flags first (OnOff), then
// per CPE in id order its caps (CapsBps of its dl paths), classes for the
// capped WATs, removal of the classes no CPE wants any more, and a read
// back of every class and filter. A CPE is not applied when OnOff could
// not flag it, its caps cannot be computed, its address has no route, its
// classes would pass the bound or do not read back.
func (d *Downlink) ApplyAll(ctx context.Context, cpes []backend.Device) (map[string]error, error) {
	notApplied, err := d.onoff.ApplyAll(ctx, cpes)
	if err != nil {
		return nil, fmt.Errorf("mptcp-shares downlink: %w", err)
	}
	if notApplied == nil {
		notApplied = map[string]error{}
	}
	sorted := slices.SortedFunc(slices.Values(cpes), func(a, b backend.Device) int { return cmp.Compare(a.CPEID, b.CPEID) })
	want := map[classKey]class{}
	caps := map[string]map[string]float64{}
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
			byWAT[k.wat] = float64(cl.bps) / 1e6
		}
		caps[c.CPEID] = byWAT
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
		d.finish(want, caps, failed, notApplied, overflow)
		return notApplied, nil
	}
	d.number(want)
	if err := d.removeStale(want); err != nil {
		return nil, fmt.Errorf("mptcp-shares downlink: %w", err)
	}
	d.finish(want, caps, d.write(want), notApplied, overflow)
	return notApplied, nil
}

// finish records what an ApplyAll left in force: the classes, the
// failures among the CPEs not applied, the caps of the others.
func (d *Downlink) finish(want map[classKey]class, caps map[string]map[string]float64, failed, notApplied map[string]error, overflow int) {
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
	d.overflow = overflow
}

// classesOf returns the classes CPE c needs (minors not yet assigned).
func (d *Downlink) classesOf(c backend.Device, routes map[netip.Addr]int) (map[classKey]class, error) {
	caps, err := CapsBps(c.Paths, d.linkMbps)
	if err != nil {
		return nil, err
	}
	out := map[classKey]class{}
	for _, p := range c.Paths {
		bps := caps[p.WAT]
		if bps == 0 || !p.Addr.IsValid() {
			continue
		}
		a := p.Addr.Unmap()
		if d.pacer != nil {
			// Pacing keys on the address alone: no interface to find.
			out[classKey{c.CPEID, p.WAT}] = class{addr: a, bps: bps}
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
		out[classKey{c.CPEID, p.WAT}] = class{ifindex: idx, addr: a, bps: bps}
	}
	return out, nil
}

// number gives every wanted class a minor: the one it had when its
// interface is the same (no churn of filters), else the lowest free one.
func (d *Downlink) number(want map[classKey]class) {
	used := map[uint16]bool{}
	keys := slices.SortedFunc(func(yield func(classKey) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	}, func(a, b classKey) int { return cmp.Or(cmp.Compare(a.cpe, b.cpe), cmp.Compare(a.wat, b.wat)) })
	for _, k := range keys {
		if old, ok := d.classes[k]; ok && old.ifindex == want[k].ifindex && !used[old.minor] {
			cl := want[k]
			cl.minor = old.minor
			want[k] = cl
			used[old.minor] = true
		}
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

// removeStale deletes the filters and classes of the last apply that are
// not wanted as they were (gone, moved or renumbered, or with another
// address), and the root HTB of interfaces left without classes.
func (d *Downlink) removeStale(want map[classKey]class) error {
	keep := map[int]bool{}
	for _, cl := range want {
		keep[cl.ifindex] = true
	}
	var errs []error
	for k, old := range d.classes {
		if cl, ok := want[k]; ok && cl.minor == old.minor && cl.ifindex == old.ifindex && cl.addr == old.addr {
			continue
		}
		if err := d.nl.FilterDel(filterDelFor(old)); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("remove filter %d of %s/%s: %w", old.minor, k.cpe, k.wat, err))
		}
		if cl, ok := want[k]; ok && cl.minor == old.minor && cl.ifindex == old.ifindex {
			continue // the class itself is replaced in place
		}
		if !minorWanted(want, old) {
			if err := d.nl.ClassDel(classFor(old)); err != nil && !isNotFound(err) {
				errs = append(errs, fmt.Errorf("remove class 1:%x of %s/%s: %w", old.minor, k.cpe, k.wat, err))
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

// minorWanted tells whether another wanted class reuses old's minor on
// old's interface (then ClassReplace rewrites it; deleting would race).
func minorWanted(want map[classKey]class, old class) bool {
	for _, cl := range want {
		if cl.minor == old.minor && cl.ifindex == old.ifindex {
			return true
		}
	}
	return false
}

// write installs the root HTB where needed, every wanted class and
// filter, and reads them back; it returns per CPE the first failure.
func (d *Downlink) write(want map[classKey]class) map[string]error {
	failed := map[string]error{}
	fail := func(k classKey, err error) {
		if _, dup := failed[k.cpe]; !dup {
			failed[k.cpe] = fmt.Errorf("%s: %w", k.wat, err)
		}
	}
	byIf := map[int][]classKey{}
	for k, cl := range want {
		byIf[cl.ifindex] = append(byIf[cl.ifindex], k)
	}
	for idx, keys := range byIf {
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
			if err := d.nl.ClassReplace(classFor(cl)); err != nil {
				fail(k, fmt.Errorf("class 1:%x at %d bit/s on %s: %w", cl.minor, cl.bps, link.Attrs().Name, err))
				continue
			}
			if err := d.nl.BfifoReplace(cl.ifindex, vnl.MakeHandle(1, cl.minor), leafHandle(cl.minor), queueBytes(cl.bps)); err != nil {
				fail(k, fmt.Errorf("leaf queue of 1:%x on %s: %w", cl.minor, link.Attrs().Name, err))
				continue
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
		d.verify(link, keys, want, fail)
	}
	return failed
}

// verify reads the classes and filters of one interface back.
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
		case !hasClass(classes, cl):
			fail(k, fmt.Errorf("verify: class 1:%x at %d bit/s missing on %s", cl.minor, cl.bps, link.Attrs().Name))
		case !hasFilter(filters, cl):
			fail(k, fmt.Errorf("verify: filter dst %s -> 1:%x missing on %s", cl.addr, cl.minor, link.Attrs().Name))
		default:
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
// borrows (there is no parent class to borrow from).
func classFor(cl class) *vnl.HtbClass {
	return htbClass(vnl.ClassAttrs{LinkIndex: cl.ifindex, Handle: vnl.MakeHandle(1, cl.minor), Parent: rootHandle}, cl.bps)
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
