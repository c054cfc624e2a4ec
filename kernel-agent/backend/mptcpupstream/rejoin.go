package mptcpupstream

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
)

var _ backend.Rejoiner = (*Backend)(nil)

// Subflows lists the namespace's established MPTCP subflows;
// mptcppm.Diag implements it.
type Subflows interface {
	Subflows() ([]mptcppm.Subflow, error)
	Close() error
}

// rejoinWaits are the waits before each check of an endpoint that Apply
// added (back): every check but the last adds it again when the
// connections still have no subflow on it, so an endpoint is re-added at
// most len-1 times per return of its link, and the last check comes
// 15.5 s after the return.
var rejoinWaits = [...]time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}

// rejoin is an endpoint that Apply added, to check.
type rejoin struct {
	wat   string
	tries int       // re-adds so far
	due   time.Time // of the next check; zero until Rejoin first sees it
}

// joinState is what the subflows say of an endpoint's address.
type joinState int

const (
	// joined: a subflow on the address exists. It is never closed, even
	// when other connections lack one: a connection opened after the
	// route returned may be the one that has it, but the endpoint's
	// removal would close it on every connection.
	joined joinState = iota
	// idle: no connection has a subflow on the device's other WATs that
	// are up; nothing is waiting for this one.
	idle
	// missing: connections run on the other WATs, none on this one.
	missing
)

// stateOf judges addr by subs; others are the addresses of the device's
// other WATs that are up.
func stateOf(subs []mptcppm.Subflow, addr netip.Addr, others map[netip.Addr]bool) joinState {
	addr, st := addr.Unmap(), idle
	for _, s := range subs {
		switch l := s.Local.Addr().Unmap(); {
		case l == addr:
			return joined
		case others[l]:
			st = missing
		}
	}
	return st
}

// Rejoin implements backend.Rejoiner. When an endpoint is added while
// connections run, the in-kernel path manager tries once, per connection,
// to open a subflow from it, and never again once that try failed: for
// example when the link came back before the route its subflows take (see
// "A lost link" in the package documentation). So each endpoint Apply
// added is checked rejoinWaits[0] after the first Rejoin call that sees
// it: while connections run on the device's other WATs and none has a
// subflow on it, it is removed and added again, with its id, flags and
// interface (the path manager then tries again), and checked again after
// the next wait; it is left as it is after the last check. A subflow on
// it, or no connection on the other WATs, ends its checks.
func (b *Backend) Rejoin(ctx context.Context, now time.Time) (backend.RejoinReport, error) {
	var rep backend.RejoinReport
	var due []netip.Addr
	for a, r := range b.rejoining {
		if r.due.IsZero() {
			r.due = now.Add(rejoinWaits[0])
		}
		if !now.Before(r.due) {
			due = append(due, a)
		}
	}
	var err error
	if len(due) > 0 {
		slices.SortFunc(due, netip.Addr.Compare)
		err = b.check(ctx, now, due, &rep)
	}
	for _, r := range b.rejoining {
		if rep.Next.IsZero() || r.due.Before(rep.Next) {
			rep.Next = r.due
		}
	}
	return rep, err
}

// check judges the endpoints due and re-adds the missing ones. Each due
// endpoint counts a try whatever happens, so a failing sock_diag or path
// manager cannot keep it checked for ever.
func (b *Backend) check(ctx context.Context, now time.Time, due []netip.Addr, rep *backend.RejoinReport) error {
	subs, err := b.sf.Subflows()
	var eps []mptcppm.Endpoint
	if err == nil {
		eps, err = b.pm.Endpoints()
	}
	if err != nil {
		for _, a := range due {
			b.next(a, now, rep)
		}
		return fmt.Errorf("mptcp-upstream: rejoin: %w", err)
	}
	byAddr := endpointsByAddr(eps)
	var errs []error
	for _, a := range due {
		r := b.rejoining[a]
		e, ok := byAddr[a]
		if !ok || stateOf(subs, a, b.others(a)) != missing {
			// Without its endpoint there is nothing to rejoin: the next
			// Apply creates it, and checks it again.
			delete(b.rejoining, a)
			continue
		}
		if r.tries < len(rejoinWaits)-1 {
			if err := b.readd(ctx, e); err != nil {
				errs = append(errs, fmt.Errorf("%s (%s): %w", r.wat, a, err))
			} else {
				rep.Readded = append(rep.Readded, r.wat)
			}
		}
		b.next(a, now, rep)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("mptcp-upstream: rejoin: %w", err)
	}
	return nil
}

// next counts a try of a's endpoint and schedules its next check, or
// gives up after the last.
func (b *Backend) next(a netip.Addr, now time.Time, rep *backend.RejoinReport) {
	r := b.rejoining[a]
	if r.tries == len(rejoinWaits)-1 {
		delete(b.rejoining, a)
		rep.GaveUp = append(rep.GaveUp, r.wat)
		return
	}
	r.tries++
	r.due = now.Add(rejoinWaits[r.tries])
}

// others returns the addresses of the other WATs of the last Apply that
// are up.
func (b *Backend) others(a netip.Addr) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, p := range b.paths {
		if p.Addr.IsValid() && !p.Down && p.Addr != a {
			out[p.Addr.Unmap()] = true
		}
	}
	return out
}

// readd removes e and adds it again as it is. When the add fails the
// endpoint is left to the next Apply, which puts it back as it was.
func (b *Backend) readd(ctx context.Context, e mptcppm.Endpoint) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := b.pm.Delete(e); err != nil {
		return err
	}
	if err := b.pm.Add(e); err != nil {
		b.removed[e.Addr] = e
		return err
	}
	return nil
}
