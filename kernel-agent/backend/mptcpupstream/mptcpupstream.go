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
//
// # A lost link (Path.Down)
//
// A backup flag stops new data on a subflow, not the data already sent on
// it: when a WAT's link is lost, that data waits for the subflow's
// retransmission timeout, and mainline's connection-level retransmission
// then resends it a segment per timeout, so the whole connection stalls.
// Closing the subflow hands everything it had not delivered back to the
// connection, which sends it on the other subflows at once. So a Down path's
// endpoint is removed (which closes its subflows on every connection and
// tells the peer, REMOVE_ADDR) and put back, with its id, flags and
// interface, once the link returns; the path manager then opens its
// subflows again. Measured in the real-stack bench's lifi-blockage
// scenario (bench/bench_realstack.py --scenario lifi-blockage, LiFi's
// carrier cut for 0.5-3 s every 3-6 s beside NR and Wi-Fi): weights that
// follow the true capacities delivered 0.78x (downlink) and 0.83x (uplink)
// of the default scheduler's goodput with backup flags alone, 0.95x and
// 0.91x with the removal (docs/benchmarks.md). An agent that dies while an endpoint is
// removed leaves it removed; the next Apply after the link returns creates
// it again (with the "subflow" flag, as for any missing endpoint).
//
// The path manager tries a returned endpoint's subflow once per
// connection, at once, and never again when that try fails; and it can
// fail, because a device's routes may come back after its link (DHCP,
// networkd: `ip link set up` restores the connected prefix route only).
// Measured in tests/e2e/test_reallink.py (wifi's interface set down and up
// under one bulk connection, its policy-routing table's default route
// added again 4-10 ms after the link): the agent added the endpoint back
// within those milliseconds; the join, bound to wifi0 and finding no route
// in wifi's table, took the proxy for on-link (neighbour 10.32.0.2
// INCOMPLETE on wifi0, then FAILED) and closed with EHOSTUNREACH 3 s later
// (MPJoinSynTx +1, no subflow from wifi's address), and the uplink stayed
// at nr's rate (13-15 Mbit/s, 22-23 with both) for the 30 s the test
// waits, until the endpoint was removed and added again by hand. In
// TestNetnsMPTCPUpstream the proxy is on the link, so the same join works
// without the route. Hence Rejoin (rejoin.go): 0.5 s after Apply adds an
// endpoint it looks at the subflows (sock_diag) and, while connections
// run on the device's other WATs and none has a subflow from the
// endpoint's address, removes the endpoint and adds it again as it was,
// which has the path manager try again; then it looks again 1, 2, 4 and
// 8 s later, so at most 4 re-adds per return of the link. A subflow from
// the address on any connection, or no connection on the other WATs, ends
// the checks: a working subflow is never closed, even when another
// connection lacks one (the removal would close it on every connection).
// With it, test_reallink.py delivered above the fastest path in both
// directions again 2.7-3.7 s after the link returned (7 runs), with a
// re-add 0.51 s after it; in 4 of the 7 a second followed at 1.5 s. The
// first re-add's removal still finds the failed join listed, so it tells
// the proxy (REMOVE_ADDR, RmAddrTx +1); when that reaches the proxy after
// the new join with the same id, the proxy closes the new subflow too
// (seen once: reset 100 ms after it was established), and the next
// re-add, with nothing left to remove, holds. An endpoint the path manager
// will not open anyway (its subflows limit reached) is re-added in vain up
// to 4 times, closing nothing.
//
// Since then the agent does not report a link that came back without the
// gateway route it had as up until that route is back, for at most 2 s
// (package linkwatch, "A link back before its route"), so Apply adds the
// endpoint after the route and the path manager's one try joins: in the
// real-stack bench's lifi-blockage scenario the endpoint went back 3.1 ms
// (median of 27 returns) after the link, and none of them needed a
// re-add, where each of the 27 returns of the same runs before had needed
// one (15) or two (12), 0.5 and 1.5 s after the return. Rejoin stays for
// routes that take longer than that.
//
// # The proxy's downlink on mainline (measured on Linux 6.18)
//
// The scheduler decides at the sender, so the downlink is the proxy's to
// steer. Measured in network namespaces shaped like the paper's setup (a
// proxy with ONE interface, a router, a CPE with nr/wifi/lifi paths under
// tbf at 30/20/10 Mbit/s in both directions, MPTCP from the CPE's three
// endpoints to the proxy's single address, bulk transfers, bytes counted on
// the CPE's interfaces over 2-3 s windows):
//
//   - A backup flag set at the CPE (its endpoint, MP_PRIO to the proxy)
//     stops the proxy's downlink on that subflow: wifi 18.3 -> 0.0 Mbit/s
//     (nr 22.1 -> 28.7, lifi 9.6). Since Linux 6.11 ("mptcp: sched: check
//     both directions for backup") the default scheduler treats a subflow
//     as backup when either end flagged it; sock_diag shows the two flags
//     apart (MPTCP_SUBFLOW_FLAG_BKUP_REM, _BKUP_LOC).
//   - The proxy can flag one subflow itself: MPTCP_PM_CMD_SET_FLAGS with
//     the connection's token, the local and the remote address (and ports).
//     The kernel accepts it only under the userspace path manager
//     (net.mptcp.path_manager = userspace; under the in-kernel one it
//     answers EINVAL) and sends MP_PRIO. Downlink on wifi 16.9 -> 0.1
//     Mbit/s, back to 15.0 when cleared.
//   - Coupling: the proxy's flag also stops the CPE's uplink on that
//     subflow (16.4 -> 0.0 Mbit/s) and the CPE's flag the proxy's
//     downlink, so on mainline a WAT is on or off for both directions at
//     once ("directions_coupled": true). Data already queued on a subflow
//     when the peer's MP_PRIO arrives still drains (about a second at
//     these rates); a flag set locally takes effect at once.
//   - Under the userspace path manager the kernel accepts a peer's MP_JOIN
//     only while some socket listens on the mptcp_pm_events group: with no
//     listener both joins were refused (MPTcpExtMPJoinRejected 2, one
//     subflow), with one all three paths carried data. The kernel counts
//     listeners host-wide (netlink's listener bitmap is not per namespace),
//     so a listener in another namespace satisfies it too. The Downlink's
//     Watch keeps one open for as long as the agent runs; while the agent
//     is down, new connections get no extra subflows (running ones keep
//     theirs).
//
// So the proxy's Downlink flags, per CPE and WAT at weight 0, every subflow
// whose remote address is that WAT's CPE address (ApplyAll for running
// connections, Watch from the established/sub_established events for new
// ones) and verifies through sock_diag; the CPE agent's endpoint flags do
// the same for the uplink. TestDownlinkInNetns checks it on the real
// kernel; integration.TestNetnsDownlinkAndUplink measures it end to end.
package mptcpupstream

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// PM is the part of mptcppm.Conn the backend uses.
type PM interface {
	Endpoints() ([]mptcppm.Endpoint, error)
	Add(mptcppm.Endpoint) error
	Delete(mptcppm.Endpoint) error
	SetFlags(mptcppm.Endpoint) error
	Close() error
}

// Backend maps weights to MPTCP endpoint backup flags. It is not safe for
// concurrent use.
type Backend struct {
	pm PM
	sf Subflows
	// removed holds the endpoints of lost links, to put back as they were.
	removed map[netip.Addr]mptcppm.Endpoint
	// rejoining holds the endpoints added (back) whose subflows are still
	// to be seen (rejoin.go); paths are those of the last Apply.
	rejoining map[netip.Addr]*rejoin
	paths     []backend.Path
}

// New returns a Backend using pm (normally from mptcppm.Dial in the
// namespace whose connections are steered) and sf to see the subflows
// there (mptcppm.DialDiag in the same namespace).
func New(pm PM, sf Subflows) *Backend {
	return &Backend{pm: pm, sf: sf, removed: map[netip.Addr]mptcppm.Endpoint{}, rejoining: map[netip.Addr]*rejoin{}}
}

// Name implements backend.Local.
func (*Backend) Name() string { return payload.BackendMPTCPUpstream }

// Capabilities implements backend.Local: on/off only.
func (*Backend) Capabilities() payload.Capabilities {
	return payload.Capabilities{MaxWeight: 1, OnOffOnly: true, Semantics: payload.SemanticsOnOff}
}

// Close closes the path-manager and sock_diag connections.
func (b *Backend) Close() error { return errors.Join(b.pm.Close(), b.sf.Close()) }

// want returns the endpoint flags a path's weight asks for, keeping flags
// the backend does not own (signal, fullmesh, ...).
func want(current mptcppm.Flags, weight int) mptcppm.Flags {
	if weight == 0 {
		return current | mptcppm.FlagBackup
	}
	return current &^ mptcppm.FlagBackup
}

// Apply sets the backup flag of each path's endpoint, removes the endpoint
// of a path whose link is lost and puts it back when the link returns, and
// verifies by listing the endpoints again. An endpoint it adds is checked
// by Rejoin afterwards.
func (b *Backend) Apply(_ context.Context, paths []backend.Path) error {
	b.paths = slices.Clone(paths)
	eps, err := b.pm.Endpoints()
	if err != nil {
		return fmt.Errorf("mptcp-upstream: %w", err)
	}
	byAddr := endpointsByAddr(eps)
	changed := false
	for _, p := range paths {
		if !p.Addr.IsValid() {
			continue
		}
		e, ok := byAddr[p.Addr]
		switch {
		case p.Down && ok:
			if err := b.pm.Delete(e); err != nil {
				return fmt.Errorf("mptcp-upstream: %s (%s) lost: %w", p.WAT, p.Addr, err)
			}
			b.removed[p.Addr] = e
			delete(b.rejoining, p.Addr)
			changed = true
		case p.Down:
			delete(b.rejoining, p.Addr)
		case !ok:
			n, was := b.removed[p.Addr]
			if !was {
				n = mptcppm.Endpoint{Addr: p.Addr, Flags: mptcppm.FlagSubflow, IfIndex: int32(p.Index)}
			}
			n.Flags = want(n.Flags, p.Weight)
			if err := b.pm.Add(n); err != nil {
				return fmt.Errorf("mptcp-upstream: %s (%s): %w", p.WAT, p.Addr, err)
			}
			delete(b.removed, p.Addr)
			b.rejoining[p.Addr] = &rejoin{wat: p.WAT}
			changed = true
		default:
			if f := want(e.Flags, p.Weight); f != e.Flags {
				e.Flags = f
				if err := b.pm.SetFlags(e); err != nil {
					return fmt.Errorf("mptcp-upstream: %s (%s): %w", p.WAT, p.Addr, err)
				}
				changed = true
			}
		}
	}
	if !changed {
		return nil
	}
	eps, err = b.pm.Endpoints()
	if err != nil {
		return fmt.Errorf("mptcp-upstream: verify: %w", err)
	}
	byAddr = endpointsByAddr(eps)
	for _, p := range paths {
		if !p.Addr.IsValid() {
			continue
		}
		e, ok := byAddr[p.Addr]
		switch {
		case p.Down && ok:
			return fmt.Errorf("mptcp-upstream: verify %s (%s): link lost, endpoint still there", p.WAT, p.Addr)
		case p.Down:
		case !ok || (e.Flags&mptcppm.FlagBackup != 0) != (p.Weight == 0):
			return fmt.Errorf("mptcp-upstream: verify %s (%s): endpoint flags %q after apply", p.WAT, p.Addr, e.Flags)
		}
	}
	return nil
}

func endpointsByAddr(eps []mptcppm.Endpoint) map[netip.Addr]mptcppm.Endpoint {
	byAddr := make(map[netip.Addr]mptcppm.Endpoint, len(eps))
	for _, e := range eps {
		byAddr[e.Addr] = e
	}
	return byAddr
}
