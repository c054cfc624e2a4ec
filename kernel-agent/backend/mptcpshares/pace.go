package mptcpshares

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpupstream"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// Pacer is what the pacing enforcer needs of a pacing.Pacer: a cap in
// bit/s per address (shared by the sockets on it), read back with Caps.
type Pacer interface {
	Set(addr netip.Addr, bps uint64) error
	Clear(addr netip.Addr) error
	Caps() (map[netip.Addr]uint64, error)
	Close() error
}

// NewPaced returns a Backend that enforces the same caps as New by pacing
// the sockets on each WAT's address (p keyed on the sockets' local
// address) instead of shaping the WAT interfaces. Only sockets in p's
// cgroup, and established after p was attached, are paced: see the
// config's mptcp_shares.enforce. The Backend closes p.
func NewPaced(pm mptcpupstream.PM, sf mptcpupstream.Subflows, p Pacer, linkMbps map[string]float64) (*Backend, error) {
	if p == nil {
		return nil, errors.New("mptcp-shares: pacing enforcer without a pacer")
	}
	return newBackend(pm, sf, linkMbps, &paceEnforcer{p: p, set: map[netip.Addr]bool{}})
}

// paceEnforcer writes each capped WAT's cap for its address into the
// pacer's map.
type paceEnforcer struct {
	p   Pacer
	set map[netip.Addr]bool // addresses this enforcer capped
}

func (e *paceEnforcer) close() error { return e.p.Close() }

// maxClasses is 0: a cap paces every socket on a WAT's address alike.
func (e *paceEnforcer) maxClasses() int { return 0 }

// enforce sets the caps (setCaps); it has no classes (Backend refuses
// them beyond maxClasses).
func (e *paceEnforcer) enforce(ctx context.Context, paths []backend.Path, caps map[string]uint64, _ []backend.Class) (map[string]float64, map[string]payload.AppliedClass, error) {
	applied, err := e.setCaps(ctx, paths, caps)
	return applied, nil, err
}

// setCaps caps the addresses of the capped WATs and clears the others
// (uncapped WATs, addresses a WAT no longer has), then reads the map
// back. A WAT without an address has no socket to pace and is skipped.
func (e *paceEnforcer) setCaps(ctx context.Context, paths []backend.Path, caps map[string]uint64) (map[string]float64, error) {
	want := map[netip.Addr]uint64{}
	wat := map[netip.Addr]string{}
	for _, p := range paths {
		if !p.Addr.IsValid() {
			continue
		}
		a := p.Addr.Unmap()
		if other, dup := wat[a]; dup {
			return nil, fmt.Errorf("%s and %s share address %s: a pacing cap is per address", other, p.WAT, a)
		}
		wat[a] = p.WAT
		want[a] = caps[p.WAT]
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for a := range e.set {
		if want[a] > 0 {
			continue
		}
		if err := e.p.Clear(a); err != nil {
			return nil, err
		}
		delete(e.set, a)
	}
	for a, bps := range want {
		if bps == 0 {
			continue
		}
		if err := e.p.Set(a, bps); err != nil {
			return nil, fmt.Errorf("%s: %w", wat[a], err)
		}
		e.set[a] = true
	}
	got, err := e.p.Caps()
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	applied := map[string]float64{}
	for a, bps := range got {
		w, ours := wat[a]
		if !ours || want[a] == 0 {
			return nil, fmt.Errorf("verify: pacing cap of %d bit/s on %s, which no capped WAT has", bps, a)
		}
		applied[w] = float64(bps) / 1e6
	}
	for a, bps := range want {
		if bps > 0 && got[a] != bps/8*8 {
			return nil, fmt.Errorf("verify: %s (%s) paced at %d bit/s, want %d", wat[a], a, got[a], bps)
		}
	}
	return applied, nil
}

// pace is the downlink's pacing enforcer: one cap per capped (CPE, WAT)
// on the CPE's WAT address (the pacer keyed on the sockets' remote
// address), stale addresses cleared, the map read back. It returns per
// CPE the first failure and the caps read back. Two CPEs on one address
// (behind one NAT) cannot be told apart: the later one in id order is
// not applied.
func (d *Downlink) pace(want map[classKey]class) (map[string]error, map[classKey]float64, error) {
	failed := map[string]error{}
	keys := slices.SortedFunc(func(yield func(classKey) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	}, cmpKeys)
	owner := map[netip.Addr]classKey{}
	for _, k := range keys {
		a := want[k].addr
		if o, dup := owner[a]; dup && o != k {
			if _, f := failed[k.cpe]; !f {
				failed[k.cpe] = fmt.Errorf("%s address %s is also CPE %s's (%s): a pacing cap is per address", k.wat, a, o.cpe, o.wat)
			}
			continue
		}
		owner[a] = k
	}
	for a, k := range owner {
		if failed[k.cpe] != nil {
			delete(owner, a)
		}
	}
	var errs []error
	for a := range d.paced {
		if _, ok := owner[a]; ok {
			continue
		}
		if err := d.pacer.Clear(a); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(d.paced, a)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	for a, k := range owner {
		if err := d.pacer.Set(a, want[k].bps); err != nil {
			failed[k.cpe] = fmt.Errorf("%s: %w", k.wat, err)
			continue
		}
		d.paced[a] = true
	}
	got, err := d.pacer.Caps()
	if err != nil {
		return nil, nil, fmt.Errorf("verify: %w", err)
	}
	read := map[classKey]float64{}
	for a, k := range owner {
		if failed[k.cpe] != nil {
			continue
		}
		bps := want[k].bps
		if got[a] != bps/8*8 {
			failed[k.cpe] = fmt.Errorf("verify: %s (%s) paced at %d bit/s, want %d", k.wat, a, got[a], bps)
			continue
		}
		read[k] = float64(got[a]) / 1e6
	}
	return failed, read, nil
}
