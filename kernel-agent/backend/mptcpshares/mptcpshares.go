package mptcpshares

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
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
		if mbps == 0 || (known && backend.AtLinkRate(mbps, link)) {
			caps[p.WAT] = 0
			continue
		}
		caps[p.WAT] = max(uint64(mbps*1e6), minCapBps)
	}
	return caps, nil
}

// keepUrgentCaps caps at its link rate each WAT that an urgent class uses
// and whose cap from the message CapsBps dropped for reaching that rate.
// The xApp caps such a WAT under its forecast so that the queue forms here,
// where the urgent class leaves first; a WAT uncapped queues in the modem
// or the access point, behind the bulk. The cap reaches the link rate
// when the forecast is explored upwards (a WAT held by its cap reports
// censored telemetry): at the link rate the queue still forms here.
func keepUrgentCaps(caps map[string]uint64, paths []backend.Path, classes []backend.Class, linkMbps map[string]float64) {
	for _, p := range paths {
		link, known := linkMbps[p.WAT]
		if !known || caps[p.WAT] != 0 || p.Weight == 0 || !backend.AtLinkRate(p.CapMbps, link) {
			continue
		}
		if slices.ContainsFunc(classes, func(c backend.Class) bool { return c.Urgent && c.Weights[p.WAT] > 0 }) {
			caps[p.WAT] = max(uint64(link*1e6), minCapBps)
		}
	}
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
	keepUrgentCaps(caps, paths, classes, b.linkMbps)
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
