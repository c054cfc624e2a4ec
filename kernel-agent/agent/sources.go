package agent

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mcw-xapp/kernel-agent/linkwatch"
	"github.com/mcw-xapp/kernel-agent/payload"
	"github.com/mcw-xapp/kernel-agent/telemetry"
)

// Where a device's paths come from: role cpe, this host's own interfaces
// (onLink, local addresses); role proxy, each CPE agent's retained state
// (onCPEState, remote addresses), which a CPE can forge, so its claims are
// checked against the operator's registry and against each other
// (conflicts) before a rule is written for them.

// onLink reacts to a change of one of this host's WAT interfaces (role
// cpe): the WAT is masked or unmasked with the next apply.
func (a *Agent) onLink(s linkwatch.Status) {
	d := a.devs[a.cfg.CPEID]
	for _, w := range a.wats {
		if a.cfg.WATs[w] != s.Interface {
			continue
		}
		old := d.slots[w]
		if s.AwaitingRoute {
			a.deps.Log.Info("link back, its route not yet", "wat", w, "interface", s.Interface, "grace_s", linkwatch.RouteGrace.Seconds())
		}
		if !d.setLocal(w, s.Interface, s) {
			continue
		}
		a.publishInfo(d)
		a.touch(d, "link", false)
		usable := s.Usable()
		if old.usable != usable {
			a.deps.Metrics.LinkEvents.WithLabelValues(w, d.links[w]).Inc()
		}
		// A new address is news too: the proxy matches the CPE's downlink
		// subflows by the addresses in the state.
		if old.usable != usable || old.addr != s.Addr {
			a.deps.Log.Info("link change", "wat", w, "interface", s.Interface, "usable", usable, "addr", s.Addr.String())
			d.setEvent(map[bool]string{true: payload.EventLinkUp, false: payload.EventLinkDown}[usable], nil)
		}
	}
}

// onCPEState takes a CPE agent's addresses and links (role proxy).
func (a *Agent) onCPEState(d *device, data []byte) {
	if len(data) == 0 {
		return // the retained state was cleared: keep what is known
	}
	s, err := payload.ParseState(data)
	switch {
	case err != nil:
	case s.CPEID != d.id:
		err = fmt.Errorf("%w: cpe_id %q on the topic of %q", payload.ErrInvalid, s.CPEID, d.id)
	case s.Role != "" && s.Role != payload.RoleCPE:
		err = fmt.Errorf("%w: role %q on a CPE agent's topic", payload.ErrInvalid, s.Role)
	default:
		err = a.registered(d.id, s.ParsedAddresses())
	}
	if err != nil {
		a.deps.Metrics.ProxyStates.WithLabelValues("invalid").Inc()
		a.deps.Log.Warn("CPE state ignored", "cpe_id", d.id, "reason", err.Error())
		return
	}
	a.deps.Metrics.ProxyStates.WithLabelValues("accepted").Inc()
	d.online = s.Online
	if !s.Online {
		// The agent's last will: its links are unknown, not down; the
		// downlink keeps its last known paths (the proxy's sender still
		// sees its subflows fail by itself).
		return
	}
	slots := map[string]slot{}
	for w, addr := range s.ParsedAddresses() {
		slots[w] = slot{addr: addr, usable: s.Links[w] != "down"}
	}
	downBefore := countDown(d.links)
	changed := !mapsEqual(slots, d.slots) || !mapsEqual(s.Links, d.links)
	d.slots, d.links = slots, s.Links
	if !changed {
		return
	}
	a.touch(d, "link", false)
	ev := payload.EventLinkUp
	if countDown(d.links) > downBefore {
		ev = payload.EventLinkDown
	}
	if d.event == "" {
		d.setEvent(ev, nil)
	}
	a.publishInfo(d)
}

func mapsEqual[V comparable](x, y map[string]V) bool {
	if len(x) != len(y) {
		return false
	}
	for k, v := range x {
		if w, ok := y[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func countDown(links map[string]string) int {
	n := 0
	for _, l := range links {
		if l == "down" {
			n++
		}
	}
	return n
}

// registered checks a CPE's claimed addresses against the operator's
// registry: the CPE's claim alone never decides which traffic is its own
// when the operator has said. An address that another CPE's prefixes also
// cover is refused too, whoever claims it: the configuration refuses such
// a registry, and this holds wherever the registry came from, so a CPE
// can never take an address merely because its owner has not reported it
// yet.
func (a *Agent) registered(id string, addrs map[string]netip.Addr) error {
	prefixes, listed := a.cfg.Prefixes[id]
	if !listed {
		return nil
	}
	for wat, addr := range addrs {
		if !slices.ContainsFunc(prefixes, func(pfx netip.Prefix) bool { return pfx.Contains(addr) }) {
			return fmt.Errorf("%w: addresses: %s=%s is outside the prefixes registered for %s (%v)", payload.ErrInvalid, wat, addr, id, prefixes)
		}
		var others []string
		for other, ps := range a.cfg.Prefixes {
			if other != id && slices.ContainsFunc(ps, func(pfx netip.Prefix) bool { return pfx.Contains(addr) }) {
				others = append(others, other)
			}
		}
		if len(others) > 0 {
			slices.Sort(others)
			return fmt.Errorf("%w: addresses: %s=%s lies in the prefixes registered for %s and for %s: the registry cannot say whose it is",
				payload.ErrInvalid, wat, addr, id, strings.Join(others, ", "))
		}
	}
	return nil
}

// clearUnserved empties the retained per-CPE state of CPEs whose state
// directory remains from an earlier configuration, then forgets them
// (role proxy).
func (a *Agent) clearUnserved() {
	dir := filepath.Join(a.cfg.StateDir, "cpe")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		id := e.Name()
		if _, served := a.devs[id]; served || !e.IsDir() || !payload.ValidCPEID(id) {
			continue
		}
		a.deps.Log.Info("CPE no longer served: clearing its downlink state", "cpe_id", id)
		a.out.put(a.pt.CPEState(id), nil, true)
		a.out.put(a.pt.LegacyCPEState(id), nil, true)
		if err := os.RemoveAll(filepath.Join(dir, id)); err != nil {
			a.deps.Log.Warn("state of an unserved CPE not removed", "cpe_id", id, "err", err)
		}
	}
}

// publishInfo hands d's paths and the caps that bound them to the
// telemetry sampler.
func (a *Agent) publishInfo(d *device) {
	info := make(map[string]telemetry.WATInfo, len(d.slots))
	for w, sl := range d.slots {
		l := d.limits[w]
		info[w] = telemetry.WATInfo{Addr: sl.addr, Up: sl.usable, CapMbps: l.capMbps, Floored: l.floored}
	}
	a.mu.Lock()
	a.watInfo[d.id] = info
	a.mu.Unlock()
}
