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
// weight to apply.
type Path struct {
	WAT       string
	Interface string
	Index     int
	Addr      netip.Addr
	Weight    int
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
