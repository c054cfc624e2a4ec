// Package mptcpshares is the mainline-Linux backend that gives WATs real
// shares rather than only on/off. Mainline MPTCP has one scheduler
// ("default"), which sends on the subflow that can take data soonest; a
// subflow whose interface is rate-capped by an egress qdisc fills its
// TCP-small-queues budget and stops taking data, so the default scheduler
// moves the rest to the other subflows. Capping each WAT's egress at its
// share of a total therefore turns the scheduler's "fastest first" into
// the requested split.
//
// One rule (CapsBps) decides the caps, two enforcers set them: HTB
// (New, described below) or the pacing of each socket on a WAT address
// by a BPF sockops program (NewPaced, package pacing; only the sockets
// of its cgroup, opened after it was attached; no qdisc touched).
//
// Per WAT interface the HTB enforcer owns the root qdisc: HTB with one class
// (1:1, the default class) whose rate and ceil are the WAT's cap, and
// under it a bfifo of 100 ms of the cap (see queueTime). The cap
// is share x T, where share = weight / sum of weights, and T is the largest
// total every WAT can carry at its share given the configured per-WAT link
// rates: T = min over WATs with weight > 0 of link_mbps / share. With
// load_balancing weights proportional to the link rates, T is their sum
// and each cap is the link rate. When the weights message carries
// caps_mbps (the xApp's share x forecast total x headroom, sent to agents
// that report capabilities.semantics rate-caps) those caps are used
// instead, and the configured rates only tell which caps reach the link
// (uncapped). The caps set are reported as applied_caps_mbps.
//
// Downlink (proxy role, Downlink): per served CPE and capped WAT one HTB
// class on the proxy's egress interface towards that WAT's CPE address
// (the route's), with a u32 filter on the address as destination; the
// root HTB has no default class, so other traffic is not shaped. Caps
// come from the CPE's dl caps_mbps or its dl weights x the configured
// rates, as above; the number of classes is bounded.
//
// A WAT at weight 0 is flagged backup on its MPTCP endpoint as by
// mptcp-upstream (the default scheduler sends nothing on a backup subflow
// while another one is up) and its cap is its full link rate, so that it
// still carries everything when it is the last path left. A WAT whose
// share of T is its whole link rate is left uncapped too: its own link is
// its limit, and a second queue in front of it only cost aggregate in the
// measurements (load_balancing with every WAT capped at its link rate:
// 35.9 and 36.7 Mbit/s of 48, against 38.5-46.8 uncapped).
//
// # Traffic classes
//
// With HTB (capabilities.max_classes 8; pacing has none: its cap is per
// address), a direction's classes each get a leaf under the WAT's class on
// every WAT, beside the leaf of the traffic no class takes (the default
// rule, whose weights and caps are today's), and one classic BPF program
// (package classify, CAP_NET_ADMIN alone) sends each packet to the leaf of
// the first class it matches; a class that matches a cgroup reads a mark
// that a program on the cgroup sets (package cgroupmark, CAP_BPF). A
// leaf's ceiling is the class's cap on the WAT, the WAT's cap it borrows
// up to, or the floor (64 kbit/s) on a WAT the class does not use; urgent
// classes' leaves come first and are guaranteed a tenth of their ceiling. A WAT carries the classes' tree even where
// it is uncapped (its parent is then unlimited); without classes the
// layout above is untouched. Details in classes.go. The proxy does the
// same per served CPE under each (CPE, WAT) class, the classes matching
// the packets' source.
//
// Measured through the real CPE agent (integration.TestNetnsClasses; two
// 20 Mbit/s paths, two bulk MPTCP uplinks to two ports; 6 runs, load
// average 1.5-3.2 from other work): a class for port A at weight 0 on
// wifi took A off wifi (from 3.4-7.0 Mbit/s to 0.0, under 2 % of A's
// bytes 103-239 ms after the weights message) while the other flow kept
// wifi (10.4-15.4 Mbit/s before, 15.4-18.8 after: it takes what A left);
// the same by the flow's cgroup (4.0-10.9 to 0.0-0.1 Mbit/s, 205-310 ms).
// A 200-byte request/response every 10 ms beside bulk on both WATs capped
// at 8 Mbit/s: RTT p50 40-75 ms in the default leaf, 7-11 ms in a class
// of its own, 0.2 ms in an urgent class (p95 97-107, 26-37 and 0.5-2 ms;
// 3.7-7.7 ms p50 before urgent leaves were guaranteed a tenth of their
// ceiling, see classes.go).
//
// # Measured on Linux 6.18 (integration.TestNetnsShares)
//
// CPE - router - proxy namespaces, three paths at 24/16/8 Mbit/s (tbf at
// the router, the 8 Mbit/s path with a 300 ms buffer), bulk MPTCP
// transfers, bytes counted on the CPE's interfaces over 3 s (`go test
// -count=1 -v -run TestNetnsShares ./integration/`). Four runs with 32 MB
// socket buffers at both ends (the test's setting), in brackets five runs
// with the default 4/6 MB:
//
//   - default scheduler alone: UL 26.6-44.4 [24.0-44.5], DL 22.1-38.3
//     [19.8-35.5] Mbit/s of 48;
//   - load_balancing 24/16/8 (all WATs uncapped), on the same connection
//     as the UL baseline: 38.6-46.8 [32.5-45.8];
//   - wifi at weight 0: 0.0 % of the bytes, under 2 % 103-809 [101-608]
//     ms after the weights message (what the subflow had queued drains);
//   - fixed_split 70/30 on two 20 Mbit/s paths (nr uncapped, wifi capped
//     at 8.57): nr 70.1-71.3 % [67.3-70.5], aggregate 27.2-28.3
//     [24.9-27.5] of the caps' 28.6, within 5 points 101-305 [101-507] ms
//     after the weights message.
//
// With caps_mbps and the proxy downlink (5 s windows for aggregates;
// 8 runs, 4 of them full-package runs, load average 0.5-2 from other
// work): the same 70/30 through the proxy's downlink classes nr
// 70.0-70.1 %, 27.2 of 28.6 Mbit/s, within 5 points 202-204 ms; 70/30
// with caps_mbps {nr: 14, wifi: 6} (every path capped) nr 69.9-70.0 % at
// 18.9-19.0 of 20 Mbit/s, except 64.3-65.1 % at 16.0-16.2 in the runs
// that followed the pacing test in the same process (the default
// scheduler under-fills the capped nr, and no uncapped path takes up the
// slack); load_balancing 38.3-45.6 against the default scheduler's
// 24.6-42.2 on the same connection.
//
// The bfifo leaf (100 ms of the cap) in place of HTB's default pfifo of
// 1000 packets (bench/bench_shares.py --runs 3, load average under 0.6):
// caps_mbps {nr: 14, wifi: 6} nr 12.45-13.27 Mbit/s against 10.88-13.27
// with the pfifo; fixed_split, wat_off, load_balancing and the proxy
// downlink within their earlier ranges.
//
// tcp_notsent_lowat (128 KB, 32 KB in the CPE namespace) raised the
// default scheduler's UL to 41-43 Mbit/s but lowered the capped
// load_balancing to 30-37; the backend does not set it.
//
// Limits: the caps are only as right as the configured link rates or the
// xApp's forecast: a link slower than its cap queues at its own
// bottleneck and the split drifts towards the default scheduler's. The
// root qdisc of each CPE WAT interface, and of each proxy interface that
// carries a capped CPE, is replaced (an operator's own qdisc there is
// lost). A downlink class matches one CPE address: CPEs behind one NAT
// address cannot be told apart (the mptcp-upstream downlink refuses the
// second one). Each class has a burst of 10 ms of its rate (see
// burstTime).
package mptcpshares

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	vnl "github.com/vishvananda/netlink"
	"golang.org/x/net/bpf"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpshares/classify"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpupstream"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// qdisc and class handles the backend owns on each WAT interface.
var (
	rootHandle  = vnl.MakeHandle(1, 0)
	classHandle = vnl.MakeHandle(1, 1)
)

// MaxLinkMbps bounds a configured link rate (the HTB rate is 32-bit bytes
// per second in the netlink encoding the library writes).
const MaxLinkMbps = 30_000

// minCapBps keeps a cap above HTB's resolution for tiny shares.
const minCapBps = 64_000

// Netlink is the part of a netlink handle the backend uses.
type Netlink interface {
	LinkByIndex(index int) (vnl.Link, error)
	QdiscReplace(qdisc vnl.Qdisc) error
	QdiscDel(qdisc vnl.Qdisc) error
	QdiscList(link vnl.Link) ([]vnl.Qdisc, error)
	ClassReplace(class vnl.Class) error
	ClassDel(class vnl.Class) error
	ClassList(link vnl.Link, parent uint32) ([]vnl.Class, error)
	// BfifoReplace and BfifoList write and read the bounded leaf queue
	// of each class (see Handle; the library has no bfifo).
	BfifoReplace(linkIndex int, parent, handle, limitBytes uint32) error
	BfifoList(linkIndex int) ([]Bfifo, error)
	// ClassifierReplace, ClassifierDel and ClassifierList write, remove
	// and read the traffic classes' classifier (see Handle; the library
	// writes no classic BPF filter).
	ClassifierReplace(linkIndex int, parent uint32, prio uint16, ops []bpf.RawInstruction) error
	ClassifierDel(linkIndex int, parent uint32, prio uint16) error
	ClassifierList(linkIndex int, parent uint32) ([]Classifier, error)
}

// Backend caps each WAT's egress rate at its share of the total and flags
// WATs at weight 0 backup. One rule (CapsBps) decides the caps; an
// enforcer sets them: HTB on each WAT interface (New) or the pacing of
// the sockets on each WAT address (NewPaced). It is not safe for
// concurrent use.
type Backend struct {
	onoff      *mptcpupstream.Backend
	linkMbps   map[string]float64
	enf        enforcer
	marker     CgroupMarker       // nil: classes cannot match a cgroup
	applied    map[string]float64 // Mbit/s per capped WAT after the last Apply
	appliedCls map[string]payload.AppliedClass
}

// enforcer sets per-WAT caps (bit/s, 0 = uncapped) computed by CapsBps,
// and the traffic classes when it has any (maxClasses > 0), and reads
// them back: it returns the caps in force, in Mbit/s per capped WAT, and
// what it set per class, or an error when they are not what was asked.
type enforcer interface {
	enforce(ctx context.Context, paths []backend.Path, caps map[string]uint64, classes []backend.Class) (map[string]float64, map[string]payload.AppliedClass, error)
	maxClasses() int
	close() error
}

// New returns a Backend that caps with HTB. nl manages qdiscs in the
// namespace whose interfaces are shaped, pm the MPTCP endpoints there and
// sf lists its subflows (see mptcpupstream.New); linkMbps is the link
// rate per WAT (every WAT the agent steers must have one > 0); marker,
// when not nil, lets traffic classes match a cgroup (the Backend closes
// it).
func New(nl Netlink, pm mptcpupstream.PM, sf mptcpupstream.Subflows, linkMbps map[string]float64, closeNL func() error, marker CgroupMarker) (*Backend, error) {
	if closeNL == nil {
		closeNL = func() error { return nil }
	}
	b, err := newBackend(pm, sf, linkMbps, &htbEnforcer{nl: nl, closeNL: closeNL})
	if err != nil {
		return nil, err
	}
	b.marker = marker
	return b, nil
}

func newBackend(pm mptcpupstream.PM, sf mptcpupstream.Subflows, linkMbps map[string]float64, enf enforcer) (*Backend, error) {
	if err := checkLinkMbps(linkMbps); err != nil {
		return nil, fmt.Errorf("mptcp-shares: %w", err)
	}
	return &Backend{onoff: mptcpupstream.New(pm, sf), linkMbps: linkMbps, enf: enf}, nil
}

func checkLinkMbps(linkMbps map[string]float64) error {
	for wat, r := range linkMbps {
		if !(r > 0) || r > MaxLinkMbps {
			return fmt.Errorf("link rate of %s %v Mbit/s: want (0, %d]", wat, r, MaxLinkMbps)
		}
	}
	return nil
}

// Name implements backend.Local.
func (*Backend) Name() string { return payload.BackendMPTCPShares }

// Capabilities implements backend.Local: integer weights, enforced as
// rate caps; directions coupled because weight 0 is the backup flag, as on
// mptcp-upstream; traffic classes with HTB (pacing caps a WAT's sockets
// together, so it has no per-class lever).
func (b *Backend) Capabilities() payload.Capabilities {
	return payload.Capabilities{MaxWeight: payload.MaxWeight, DirectionsCoupled: true, Semantics: payload.SemanticsRateCaps,
		MaxClasses: b.enf.maxClasses()}
}

// CheckClasses implements backend.ClassChecker: the classifier must be
// able to express the classes (a bounded program; a cgroup needs the
// marker and must exist).
func (b *Backend) CheckClasses(classes []payload.Class) error {
	return checkClasses(classify.Uplink, classes, b.marker)
}

// Close releases the path-manager handle and the enforcer's (the netlink
// handle, or the pacing program, which is detached), and detaches the
// cgroups' marking programs.
func (b *Backend) Close() error {
	var merr error
	if b.marker != nil {
		merr = b.marker.Close()
	}
	return errors.Join(b.onoff.Close(), b.enf.close(), merr)
}

var _ backend.Rejoiner = (*Backend)(nil)

// Rejoin implements backend.Rejoiner as mptcp-upstream does: a lost
// link's endpoint is removed and put back by the on/off part.
func (b *Backend) Rejoin(ctx context.Context, now time.Time) (backend.RejoinReport, error) {
	rep, err := b.onoff.Rejoin(ctx, now)
	if err != nil {
		return rep, fmt.Errorf("mptcp-shares: %w", err)
	}
	return rep, nil
}

// Caps returns the egress cap in bits per second per WAT for paths (see
// CapsBps).
func (b *Backend) Caps(paths []backend.Path) (map[string]uint64, error) {
	return CapsBps(paths, b.linkMbps)
}

// CapsBps returns the egress cap in bits per second per WAT for paths,
// given the configured link rates. When any path carries a cap from the
// weights message (CapMbps > 0) the message decides: each WAT with a
// weight > 0 is capped at its CapMbps (uncapped when the message gives it
// none). Otherwise the caps are the weights' shares of the largest total
// the link rates allow. Either way 0 means uncapped: a WAT at weight 0
// (off through its backup flag, whatever cap the message gives it: the
// last path left must carry everything) and a WAT whose cap reaches its
// link rate (its own link is the limit, a cap there would only add a
// second queue). It is an error for a path to have no configured link
// rate when the caps are derived from them, or for all weights to be 0.
func CapsBps(paths []backend.Path, linkMbps map[string]float64) (map[string]uint64, error) {
	sum, fromMessage := 0, false
	for _, p := range paths {
		if p.Weight < 0 || p.Weight > payload.MaxWeight {
			return nil, fmt.Errorf("mptcp-shares: %s: weight %d out of [0, %d]", p.WAT, p.Weight, payload.MaxWeight)
		}
		if p.CapMbps < 0 || p.CapMbps > payload.MaxCapMbps || math.IsNaN(p.CapMbps) {
			return nil, fmt.Errorf("mptcp-shares: %s: cap %v Mbit/s out of [0, %d]", p.WAT, p.CapMbps, payload.MaxCapMbps)
		}
		sum += p.Weight
		fromMessage = fromMessage || p.CapMbps > 0
	}
	if sum == 0 {
		return nil, errors.New("mptcp-shares: every weight is 0")
	}
	want := make(map[string]float64, len(paths)) // Mbit/s
	if fromMessage {
		for _, p := range paths {
			if p.Weight > 0 {
				want[p.WAT] = p.CapMbps
			}
		}
	} else {
		total := math.Inf(1)
		for _, p := range paths {
			link, ok := linkMbps[p.WAT]
			if !ok {
				return nil, fmt.Errorf("mptcp-shares: no link rate configured for %s", p.WAT)
			}
			if p.Weight > 0 {
				total = math.Min(total, link*float64(sum)/float64(p.Weight))
			}
		}
		for _, p := range paths {
			if p.Weight > 0 {
				want[p.WAT] = total * float64(p.Weight) / float64(sum)
			}
		}
	}
	caps := make(map[string]uint64, len(paths))
	for _, p := range paths {
		mbps := want[p.WAT]
		link, known := linkMbps[p.WAT]
		if mbps == 0 || (known && mbps >= link*(1-1e-9)) {
			caps[p.WAT] = 0
			continue
		}
		caps[p.WAT] = max(uint64(mbps*1e6), minCapBps)
	}
	return caps, nil
}

// capsMbps turns the non-zero caps into Mbit/s, as reported in state.
func capsMbps(caps map[string]uint64) map[string]float64 {
	out := map[string]float64{}
	for wat, bps := range caps {
		if bps > 0 {
			out[wat] = float64(bps) / 1e6
		}
	}
	return out
}

// AppliedCaps implements backend.LocalCapsReporter.
func (b *Backend) AppliedCaps() map[string]float64 { return b.applied }

// AppliedClasses implements backend.LocalClasses.
func (b *Backend) AppliedClasses() map[string]payload.AppliedClass { return b.appliedCls }

// Apply implements backend.Local: ApplyClasses without classes.
func (b *Backend) Apply(ctx context.Context, paths []backend.Path) error {
	return b.ApplyClasses(ctx, paths, nil)
}

// ApplyClasses implements backend.LocalClasses: it sets the backup flags
// (a WAT no rule uses), then each WAT's cap and the classes through the
// enforcer, which reads them back.
func (b *Backend) ApplyClasses(ctx context.Context, paths []backend.Path, classes []backend.Class) error {
	if n := b.enf.maxClasses(); len(classes) > n {
		return fmt.Errorf("mptcp-shares: %d traffic classes, this enforcer applies %d", len(classes), n)
	}
	caps, err := b.Caps(paths)
	if err != nil {
		return err
	}
	if err := b.onoff.Apply(ctx, onOffPaths(paths, classes)); err != nil {
		return fmt.Errorf("mptcp-shares: %w", err)
	}
	marks := cgroupMarks(classes)
	if len(marks) > 0 && b.marker == nil {
		return fmt.Errorf("mptcp-shares: %w", errNoMarker)
	}
	b.applied, b.appliedCls = nil, nil // unknown until every cap reads back
	applied, cls, err := b.enf.enforce(ctx, paths, caps, classes)
	if err != nil {
		return fmt.Errorf("mptcp-shares: %w", err)
	}
	if b.marker != nil {
		if err := b.marker.Set(marks); err != nil {
			return fmt.Errorf("mptcp-shares: %w", err)
		}
	}
	b.applied, b.appliedCls = applied, cls
	return nil
}

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
