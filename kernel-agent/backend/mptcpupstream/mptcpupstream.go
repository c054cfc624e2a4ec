// Package mptcpupstream is the backend for mainline Linux MPTCP. Mainline
// has no weighted scheduler (only "default"), but an endpoint flagged backup
// carries no outgoing data while a non-backup path is up, so weights map to
// on/off: weight 0 flags the WAT's endpoint backup, a positive weight clears
// the flag. Flags are set through the mptcp_pm generic netlink family; the
// kernel signals the change (MP_PRIO) on running connections at once.
//
// If a WAT's address has no endpoint, Apply creates one with the "subflow"
// flag bound to the WAT's interface, so that new connections open a subflow
// on every WAT; the path manager's limits (`ip mptcp limits`) stay the
// operator's choice.
package mptcpupstream

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// PM is the part of mptcppm.Conn the backend uses.
type PM interface {
	Endpoints() ([]mptcppm.Endpoint, error)
	Add(mptcppm.Endpoint) error
	SetFlags(mptcppm.Endpoint) error
	Close() error
}

// Backend maps weights to MPTCP endpoint backup flags. It is not safe for
// concurrent use.
type Backend struct {
	pm PM
}

// New returns a Backend using pm (normally from mptcppm.Dial in the
// namespace whose connections are steered).
func New(pm PM) *Backend { return &Backend{pm: pm} }

// Name implements backend.Backend.
func (*Backend) Name() string { return payload.BackendMPTCPUpstream }

// Capabilities implements backend.Backend: on/off only.
func (*Backend) Capabilities() payload.Capabilities {
	return payload.Capabilities{MaxWeight: 1, OnOffOnly: true}
}

// Close closes the path-manager connection.
func (b *Backend) Close() error { return b.pm.Close() }

// want returns the endpoint flags a path's weight asks for, keeping flags
// the backend does not own (signal, fullmesh, ...).
func want(current mptcppm.Flags, weight int) mptcppm.Flags {
	if weight == 0 {
		return current | mptcppm.FlagBackup
	}
	return current &^ mptcppm.FlagBackup
}

// Apply sets the backup flag of each path's endpoint and verifies by
// listing the endpoints again.
func (b *Backend) Apply(_ context.Context, paths []backend.Path) error {
	eps, err := b.pm.Endpoints()
	if err != nil {
		return fmt.Errorf("mptcp-upstream: %w", err)
	}
	byAddr := make(map[netip.Addr]mptcppm.Endpoint, len(eps))
	for _, e := range eps {
		byAddr[e.Addr] = e
	}
	changed := false
	for _, p := range paths {
		if !p.Addr.IsValid() {
			continue
		}
		e, ok := byAddr[p.Addr]
		if !ok {
			n := mptcppm.Endpoint{Addr: p.Addr, Flags: want(mptcppm.FlagSubflow, p.Weight), IfIndex: int32(p.Index)}
			if err := b.pm.Add(n); err != nil {
				return fmt.Errorf("mptcp-upstream: %s (%s): %w", p.WAT, p.Addr, err)
			}
			changed = true
			continue
		}
		if f := want(e.Flags, p.Weight); f != e.Flags {
			e.Flags = f
			if err := b.pm.SetFlags(e); err != nil {
				return fmt.Errorf("mptcp-upstream: %s (%s): %w", p.WAT, p.Addr, err)
			}
			changed = true
		}
	}
	if !changed {
		return nil
	}
	eps, err = b.pm.Endpoints()
	if err != nil {
		return fmt.Errorf("mptcp-upstream: verify: %w", err)
	}
	byAddr = make(map[netip.Addr]mptcppm.Endpoint, len(eps))
	for _, e := range eps {
		byAddr[e.Addr] = e
	}
	for _, p := range paths {
		if !p.Addr.IsValid() {
			continue
		}
		e, ok := byAddr[p.Addr]
		if !ok || (e.Flags&mptcppm.FlagBackup != 0) != (p.Weight == 0) {
			return fmt.Errorf("mptcp-upstream: verify %s (%s): endpoint flags %q after apply", p.WAT, p.Addr, e.Flags)
		}
	}
	return nil
}
