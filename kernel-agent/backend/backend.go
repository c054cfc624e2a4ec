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
	"net/netip"

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
// CPE's downlink at a proxy.
type Device struct {
	CPEID string
	Paths []Path
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

// RuleCounter is implemented by backends that write a bounded list of
// rules for all devices (wrr-sysctl: tuples): how many the last successful
// ApplyAll wrote and the bound. The proxy reports them in its state.
type RuleCounter interface {
	Rules() (used, limit int)
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
		return nil, o.Apply(ctx, devices[0].Paths)
	}
	return nil, fmt.Errorf("%w, not %d", ErrOneDevice, len(devices))
}

func (o own) AppliedCaps(string) map[string]float64 {
	if cr, ok := o.Local.(LocalCapsReporter); ok {
		return cr.AppliedCaps()
	}
	return nil
}
