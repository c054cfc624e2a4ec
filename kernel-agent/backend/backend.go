// Package backend defines how the agent hands weights to the kernel: one
// interface, Backend, that applies the paths of a set of devices at once
// (the CPE role hands it one device, its own; the proxy role every CPE it
// serves), with an implementation per kernel family (wrrsysctl for the
// 5G-CLARITY WRR kernel, mptcpupstream and mptcpshares for mainline Linux,
// dryrun for tests and trials). A kernel writer that only ever steers this
// host's own paths implements the smaller Local and is adapted by Own.
package backend

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/mcw-xapp/kernel-agent/payload"
)

// Path is one WAT as a backend sees it: the interface the WAT's traffic
// leaves by and its index (a CPE's own paths; unused for a proxy's), the
// WAT's address (the CPE's own: the local address of its subflows on the
// CPE, the remote one at a proxy; invalid when it has none) and the weight
// to apply. CapMbps is the weights message's caps_mbps for the WAT (0: the
// message has none); only rate-caps backends read it. Down says the WAT's
// link is lost (the CPE's link watch): its Weight is 0, and a backend that
// can also hand the path's unacknowledged data to the other paths at once
// does (mptcp-upstream and mptcp-shares close its subflows).
type Path struct {
	WAT       string
	Interface string
	Index     int
	Addr      netip.Addr
	Weight    int
	CapMbps   float64
	Down      bool
}

// Device is one CPE's paths: the CPE role's own uplink, or one served
// CPE's downlink at a proxy; Classes are its traffic classes, in the order
// a packet meets them (nil: the paths' weights steer all traffic). Only a
// backend whose Capabilities().MaxClasses is at least len(Classes) is
// handed classes.
type Device struct {
	CPEID   string
	Paths   []Path
	Classes []Class
}

// Equal reports whether d and o hand a backend the same things.
func (d Device) Equal(o Device) bool {
	return d.CPEID == o.CPEID && slices.Equal(d.Paths, o.Paths) && slices.EqualFunc(d.Classes, o.Classes, Class.Equal)
}

// Class is one traffic class as a backend applies it on a device's paths.
// Weights holds a weight for every WAT of the paths, after the agent's
// link reactions: > 0, the class uses the WAT (up to its CapsMbps there,
// or the WAT's own cap when it has none); 0, it does not (a backend
// throttles it there to its floor). When none of the WATs the class
// weighted is usable, the agent hands the default rule's weights instead,
// so the class follows the default rule's treatment on each WAT.
type Class struct {
	Name     string
	Match    payload.Match
	Urgent   bool
	Weights  payload.Weights
	CapsMbps map[string]float64
}

// Equal reports whether c and o are the same class.
func (c Class) Equal(o Class) bool {
	m, n := c.Match, o.Match
	return c.Name == o.Name && c.Urgent == o.Urgent && c.Weights.Equal(o.Weights) && maps.Equal(c.CapsMbps, o.CapsMbps) &&
		slices.Equal(m.DSCP, n.DSCP) && slices.Equal(m.Protocols, n.Protocols) && slices.Equal(m.RemotePorts, n.RemotePorts) &&
		slices.Equal(m.RemotePrefixes, n.RemotePrefixes) && m.Cgroup == n.Cgroup
}

// ClassUses tells whether any of classes sends on wat (a weight above 0
// there). A WAT a class uses is not made backup: the default rule's
// traffic on it at weight 0 is held at its floor instead (see Class).
func ClassUses(classes []Class, wat string) bool {
	return slices.ContainsFunc(classes, func(c Class) bool { return c.Weights[wat] > 0 })
}

// Backend applies the weights of a set of devices. The kernels' rules are
// global (one WRR tuple list) or per connection (mainline path manager), so
// the whole set is handed at once.
//
// ApplyAll must leave the kernel in the requested state for every device it
// reports as applied, verified by reading back, and return the ids of the
// devices it could not express (e.g. beyond a rule bound) with why, or an
// error when nothing was applied. Devices absent from the set are no longer
// steered: a backend for many devices removes their rules. Paths whose Addr
// is invalid cannot be expressed by address-based backends and are skipped
// by them. Called from one goroutine at a time.
type Backend interface {
	// Name is the backend's name as reported in state payloads.
	Name() string
	// Capabilities tells the xApp what the backend can express.
	Capabilities() payload.Capabilities
	// ApplyAll sets the weights of every device in the set and verifies them.
	ApplyAll(ctx context.Context, devices []Device) (notApplied map[string]error, err error)
	// Close releases the backend's resources.
	Close() error
}

// CapsReporter is implemented by rate-caps backends: the egress cap in
// Mbit/s per WAT that the last successful ApplyAll set for one device (nil
// when it set none; a WAT absent is uncapped). The agent reports it as
// applied_caps_mbps.
type CapsReporter interface {
	AppliedCaps(cpeID string) map[string]float64
}

// AtLinkRate tells whether a rate of mbps reaches linkMbps, the WAT's
// configured link rate: a cap there holds the WAT where its link would, so
// it is no cap to apply, and what the WAT delivers under it measures the
// link. The tolerance absorbs the rounding of a rate derived from weights.
func AtLinkRate(mbps, linkMbps float64) bool { return mbps >= linkMbps*(1-1e-9) }

// ClassReporter is implemented by backends that apply traffic classes:
// what the last successful ApplyAll set per class of one device, by class
// name (nil when the device has none). The agent reports it as
// applied_classes.
type ClassReporter interface {
	AppliedClasses(cpeID string) map[string]payload.AppliedClass
}

// ClassChecker is implemented by backends that can tell, before anything
// is written, that they cannot apply a direction's classes (a match they
// cannot express here); the agent then refuses the message with the
// reason.
type ClassChecker interface {
	CheckClasses(classes []payload.Class) error
}

// RuleCounter is implemented by backends that write a bounded list of
// rules for all devices (wrr-sysctl: tuples): how many the last successful
// ApplyAll wrote and the bound. The proxy reports them in its state.
type RuleCounter interface {
	Rules() (used, limit int)
}

// Rejoiner is implemented by backends that, when a lost link returns,
// put its path back in a way that can fail after the fact: mainline's
// in-kernel path manager tries a returned endpoint's subflows once, and a
// join that fails (no route yet) is not tried again. Rejoin runs the
// checks due at now (and repairs what they find) and says when the next
// is due. The agent calls it after every ApplyAll that wrote the kernel
// and when that time comes, from the goroutine that calls ApplyAll; an
// error asks for the set to be applied again (a repair may have left a
// path out).
type Rejoiner interface {
	Rejoin(ctx context.Context, now time.Time) (RejoinReport, error)
}

// RejoinReport is what one Rejoin did: the WATs whose path it put back
// again (no connection had rejoined it), those it gave up on (still none
// after its last try: left as they are), and when to call it next (the
// zero time: nothing left to check).
type RejoinReport struct {
	Readded []string
	GaveUp  []string
	Next    time.Time
}

// Local is a kernel writer that steers this host's own paths only (the CPE
// role): Apply must either leave the kernel in the requested state,
// verified by reading it back, or return an error. Own adapts it to
// Backend.
type Local interface {
	Name() string
	Capabilities() payload.Capabilities
	Apply(ctx context.Context, paths []Path) error
	Close() error
}

// LocalCapsReporter is CapsReporter for a Local backend.
type LocalCapsReporter interface {
	AppliedCaps() map[string]float64
}

// LocalClasses is a Local backend that also applies traffic classes: Own
// hands it every set through ApplyClasses (classes nil when there are
// none, so that it removes what it set before).
type LocalClasses interface {
	ApplyClasses(ctx context.Context, paths []Path, classes []Class) error
	AppliedClasses() map[string]payload.AppliedClass
}

// ErrNoClasses: a backend that applies no traffic classes was handed some
// (the agent refuses such messages first).
var ErrNoClasses = errors.New("backend: this backend applies no traffic classes")

// Own adapts l to Backend: a set holds at most one device, this host's
// own; an empty set leaves the kernel as it is (a host never stops steering
// itself).
func Own(l Local) Backend { return own{l} }

type own struct{ Local }

// ErrOneDevice: a Local backend was handed more than one device.
var ErrOneDevice = errors.New("backend: a host's own backend steers one device")

func (o own) ApplyAll(ctx context.Context, devices []Device) (map[string]error, error) {
	switch len(devices) {
	case 0:
		return nil, nil
	case 1:
		d := devices[0]
		if lc, ok := o.Local.(LocalClasses); ok {
			return nil, lc.ApplyClasses(ctx, d.Paths, d.Classes)
		}
		if len(d.Classes) > 0 {
			return nil, fmt.Errorf("%s: %w", o.Name(), ErrNoClasses)
		}
		return nil, o.Apply(ctx, d.Paths)
	}
	return nil, fmt.Errorf("%w, not %d", ErrOneDevice, len(devices))
}

func (o own) AppliedClasses(string) map[string]payload.AppliedClass {
	if lc, ok := o.Local.(LocalClasses); ok {
		return lc.AppliedClasses()
	}
	return nil
}

func (o own) CheckClasses(classes []payload.Class) error {
	if cc, ok := o.Local.(ClassChecker); ok {
		return cc.CheckClasses(classes)
	}
	return nil
}

func (o own) Rejoin(ctx context.Context, now time.Time) (RejoinReport, error) {
	if r, ok := o.Local.(Rejoiner); ok {
		return r.Rejoin(ctx, now)
	}
	return RejoinReport{}, nil
}

func (o own) AppliedCaps(string) map[string]float64 {
	if cr, ok := o.Local.(LocalCapsReporter); ok {
		return cr.AppliedCaps()
	}
	return nil
}
