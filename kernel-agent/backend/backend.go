// Package backend defines how the agent hands weights to the kernel: one
// small interface with an implementation per kernel family (wrrsysctl for
// the 5G-CLARITY WRR kernel, mptcpupstream for mainline Linux, dryrun for
// tests and trials).
package backend

import (
	"context"
	"net/netip"

	"github.com/mcw-xapp/kernel-agent/payload"
)

// Path is one WAT as a backend sees it: the interface the WAT's traffic
// leaves by, that interface's IPv4 address (invalid when it has none) and the
// weight to apply. CapMbps is the weights message's caps_mbps for the WAT
// (0: the message has none); only rate-caps backends read it.
type Path struct {
	WAT       string
	Interface string
	Index     int
	Addr      netip.Addr
	Weight    int
	CapMbps   float64
}

// Backend applies per-WAT weights to the kernel.
//
// Apply must either leave the kernel in the requested state, verified by
// reading it back, or return an error; it is called from one goroutine at a
// time. Paths whose Addr is invalid cannot be expressed by address-based
// backends and are skipped by them (no subflow can use an address the
// interface does not have).
type Backend interface {
	// Name is the backend's name as reported in state payloads.
	Name() string
	// Capabilities tells the xApp what the backend can express.
	Capabilities() payload.Capabilities
	// Apply sets the weights of paths and verifies them.
	Apply(ctx context.Context, paths []Path) error
	// Close releases the backend's resources.
	Close() error
}

// CPEPaths is one CPE's downlink paths as a proxy sees them: WAT is the CPE's
// WAT, Addr the CPE-side address of that WAT (the subflows' remote address at
// the proxy), Weight the downlink weight. Interface and Index are unused.
type CPEPaths struct {
	CPEID string
	Paths []Path
}

// Downlink applies the downlink weights of every CPE a proxy serves. The
// kernels' rules are global (one WRR tuple list) or per connection (mainline
// path manager), so a proxy hands the whole served set at once.
//
// ApplyAll must leave the kernel in the requested state for every CPE it
// reports as applied, verified by reading back, and return the ids of the
// CPEs it could not express (e.g. beyond a rule bound) with why, or an error
// when nothing was applied. CPEs absent from cpes are no longer served: their
// rules are removed. Called from one goroutine at a time.
type Downlink interface {
	Name() string
	Capabilities() payload.Capabilities
	ApplyAll(ctx context.Context, cpes []CPEPaths) (notApplied map[string]error, err error)
	Close() error
}

// CapsReporter is implemented by rate-caps backends: the egress cap in
// Mbit/s per WAT that the last successful Apply set (a WAT absent is
// uncapped). The agent reports it as applied_caps_mbps.
type CapsReporter interface {
	AppliedCaps() map[string]float64
}

// DownlinkCapsReporter is CapsReporter for a downlink: the caps the last
// successful ApplyAll set for one CPE (nil when it set none).
type DownlinkCapsReporter interface {
	AppliedCaps(cpeID string) map[string]float64
}

// RuleCounter is implemented by downlink backends that write a bounded list
// of rules for all CPEs (wrr-sysctl: tuples): how many the last successful
// ApplyAll wrote and the bound. The proxy reports them in its state.
type RuleCounter interface {
	Rules() (used, limit int)
}
