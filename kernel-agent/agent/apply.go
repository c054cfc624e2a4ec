package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// overflowCounter is a backend that tells the devices it left out for its
// rule bound from those it could not express for other reasons
// (wrr-sysctl); otherwise every device not applied counts as overflow.
type overflowCounter interface {
	OverflowCPEs() int
}

// flush applies the set when anything changed, then reports.
func (a *Agent) flush(ctx context.Context) {
	if a.dirty {
		a.apply(ctx)
	}
	for _, id := range a.order {
		if d := a.devs[id]; d.event != "" {
			a.report(d)
		}
	}
	if !a.local {
		a.reportProxy()
	}
}

// apply hands every expressible device to the backend and settles the
// pending updates by the result. A set equal to the last one applied is
// not handed again unless forced (an update, a lease end, a retry: the
// backend then re-writes and verifies it).
func (a *Agent) apply(ctx context.Context) {
	force, cause := a.force, a.cause
	a.dirty, a.force, a.cause = false, false, ""
	m := a.deps.Metrics
	set := make([]backend.Device, 0, len(a.order))
	want := map[string]backend.Device{}
	conflicts := a.conflicts()
	for _, id := range a.order {
		d := a.devs[id]
		if d.changed {
			d.want, d.wantErr = d.plan()
			d.changed = false
		}
		ps, err := d.want, d.wantErr
		if cerr, clash := conflicts[id]; clash {
			// Neither claimant is steered: whichever is lying, a rule for
			// that address would act on the other's traffic.
			ps, err = backend.Device{}, cerr
			if d.alarm == "" {
				d.setEvent(payload.EventRejected, cerr)
			}
			d.alarm = payload.AlarmAddressConflict
		} else if d.alarm != "" {
			d.alarm = ""
			d.setEvent(payload.EventApplied, nil)
		}
		d.unexpr = err
		if err != nil && d.alarm == "" {
			ps = d.applied // keep what is in force: never all zero
		}
		if ps.Paths == nil {
			continue
		}
		want[id] = ps
		set = append(set, ps)
	}
	var notApplied map[string]error
	if !force && a.lastOK && sameSet(set, a.lastSet) {
		notApplied = a.lastNotApplied
	} else {
		t0 := time.Now()
		var err error
		notApplied, err = a.deps.Backend.ApplyAll(ctx, set)
		m.ApplySeconds.Observe(time.Since(t0).Seconds())
		if err != nil {
			a.failed(err, len(set), cause == "retry")
			return
		}
		m.Applies.WithLabelValues(cause).Inc()
		a.checkRejoins(ctx)
	}
	a.lastSet, a.lastNotApplied, a.lastOK, a.applyErr = set, notApplied, true, ""
	for _, id := range a.order {
		d := a.devs[id]
		ps, sent := want[id]
		wasIn := d.applied.Paths != nil && d.unexpr == nil
		if nerr, refused := notApplied[id]; refused {
			d.applied, d.unexpr = backend.Device{}, fmt.Errorf("not applied by %s: %w", a.deps.Backend.Name(), nerr)
		} else if sent {
			d.applied = ps
		} else if d.alarm != "" {
			d.applied = backend.Device{} // left out of the set: its rules are gone
		}
		// A device can enter or leave the kernel without news of its own
		// (room under the rule bound, a retry after a failure): say so.
		if isIn := d.applied.Paths != nil && d.unexpr == nil; isIn != wasIn && d.event == "" {
			if isIn {
				d.setEvent(payload.EventApplied, nil)
			} else {
				d.setEvent(payload.EventRejected, d.unexpr)
			}
		}
		a.settle(d, nil)
		if l := a.ownLimits(d); !maps.Equal(l, d.limits) {
			d.limits = l
			a.publishInfo(d)
		}
	}
	if a.local {
		d := a.devs[a.order[0]]
		for _, p := range d.applied.Paths {
			m.Weight.WithLabelValues(p.WAT).Set(float64(p.Weight))
		}
		m.AppliedVersion.Set(float64(d.appliedVersion()))
		var wats []string
		for _, p := range d.applied.Paths {
			wats = append(wats, p.WAT)
		}
		m.SetClasses(a.appliedClasses(d), wats)
		return
	}
	if rc, ok := a.deps.Backend.(backend.RuleCounter); ok {
		a.rules.Used, a.rules.Limit = rc.Rules()
	}
	a.rules.OverflowCPEs = len(notApplied)
	if oc, ok := a.deps.Backend.(overflowCounter); ok {
		a.rules.OverflowCPEs = oc.OverflowCPEs()
	}
	a.updateGauges()
}

// checkRejoins gives a backend.Rejoiner its checks of the paths it put
// back and arms the timer for the next. A failed check may have left a
// path out: the set is applied again, which puts it back.
func (a *Agent) checkRejoins(ctx context.Context) {
	r, ok := a.deps.Backend.(backend.Rejoiner)
	if !ok {
		return
	}
	now := a.deps.Now()
	rep, err := r.Rejoin(ctx, now)
	for _, wat := range rep.Readded {
		a.deps.Metrics.Rejoins.WithLabelValues(wat, "readded").Inc()
		a.deps.Log.Info("link returned but no connection rejoined it: path put back again", "wat", wat)
	}
	for _, wat := range rep.GaveUp {
		a.deps.Metrics.Rejoins.WithLabelValues(wat, "gave_up").Inc()
		a.deps.Log.Warn("link returned but no connection rejoined it after the last try: left as it is", "wat", wat)
	}
	if err != nil {
		a.deps.Log.Warn("rejoin check failed", "err", err)
		a.touchAll("rejoin")
	}
	a.rejoin.Stop()
	if !rep.Next.IsZero() {
		a.rejoin.Reset(max(0, rep.Next.Sub(now)))
	}
}

// failed handles an ApplyAll that applied nothing: the kernel's state is
// unknown (the next batch, or the retry a second later, applies again),
// every pending update is rolled back. A retry that fails as the last
// attempt did is not reported again.
func (a *Agent) failed(err error, n int, retry bool) {
	again := retry && a.applyErr == err.Error()
	a.deps.Metrics.ApplyErrors.Inc()
	a.lastOK, a.applyErr = false, err.Error()
	a.deps.Log.Error("apply failed", "devices", n, "err", err)
	for _, id := range a.order {
		d := a.devs[id]
		d.applied = backend.Device{}
		if d.pending != nil {
			a.settle(d, err)
			continue
		}
		switch {
		case d.event == "" && !again:
			d.setEvent(payload.EventRejected, err)
		case d.event != "" && d.eventErr == nil:
			d.eventErr = err
		}
	}
}

// sameSet reports whether two sets hand the backend the same things.
func sameSet(x, y []backend.Device) bool {
	return slices.EqualFunc(x, y, backend.Device.Equal)
}

func (d *device) appliedVersion() int64 {
	if d.safe || d.applied.Paths == nil {
		return 0
	}
	return d.tracker.Version()
}

// conflicts returns, per served CPE, why one of its claimed WAT addresses
// cannot be steered: another served CPE claims the same address.
func (a *Agent) conflicts() map[string]error {
	if a.local {
		return nil
	}
	owners := map[string][]string{}
	for _, id := range a.order {
		for _, sl := range a.devs[id].slots {
			owners[sl.addr.String()] = append(owners[sl.addr.String()], id)
		}
	}
	out := map[string]error{}
	for addr, ids := range owners {
		if len(ids) < 2 {
			continue
		}
		for _, id := range ids {
			others := slices.DeleteFunc(slices.Clone(ids), func(o string) bool { return o == id })
			out[id] = errors.Join(out[id], fmt.Errorf("%s: address %s also claimed by %s: downlink not steered",
				payload.AlarmAddressConflict, addr, strings.Join(others, ", ")))
		}
	}
	return out
}

// appliedClasses is what the backend set per class of d while d's set
// is in the kernel as requested (nil otherwise, or without classes).
func (a *Agent) appliedClasses(d *device) map[string]payload.AppliedClass {
	cr, ok := a.deps.Backend.(backend.ClassReporter)
	if !ok || d.applied.Paths == nil || d.unexpr != nil || len(d.applied.Classes) == 0 {
		return nil
	}
	return cr.AppliedClasses(d.id)
}

func (a *Agent) updateGauges() {
	var applied, safe, unexpr, conflict, classes float64
	for _, d := range a.devs {
		if d.alarm == payload.AlarmAddressConflict {
			conflict++
		}
		if len(a.appliedClasses(d)) > 0 {
			classes++
		}
		switch {
		case d.applied.Paths == nil || d.unexpr != nil:
			unexpr++
		case d.safe:
			safe++
		default:
			applied++
		}
	}
	g := a.deps.Metrics.ProxyCPEs
	g.WithLabelValues("served").Set(float64(len(a.devs)))
	g.WithLabelValues("applied").Set(applied)
	g.WithLabelValues("safe").Set(safe)
	g.WithLabelValues("unexpressed").Set(unexpr)
	g.WithLabelValues("address_conflict").Set(conflict)
	g.WithLabelValues("classes").Set(classes)
	a.deps.Metrics.ProxyRules.WithLabelValues("used").Set(float64(a.rules.Used))
	a.deps.Metrics.ProxyRules.WithLabelValues("limit").Set(float64(a.rules.Limit))
}

// report builds d's state and queues it: role cpe, direction ul, with the
// addresses of its WATs; role proxy, direction dl, with the proxy's id and
// the CPE's alarm.
func (a *Agent) report(d *device) {
	event, err := d.event, d.eventErr
	d.event, d.eventErr = "", nil
	if err == nil && d.unexpr != nil {
		err = d.unexpr
	}
	if err != nil {
		d.lastError = err.Error()
		if len(d.lastError) > payload.MaxErrorLen {
			d.lastError = d.lastError[:payload.MaxErrorLen]
		}
	} else if event != payload.EventRejected {
		d.lastError = ""
	}
	caps := a.caps
	s := payload.State{
		CPEID: d.id, Online: true, Role: payload.RoleCPE, Direction: a.dir, TimeMs: a.deps.Now().UnixMilli(),
		AppliedVersion: d.appliedVersion(), AppliedWeights: payload.Weights{}, Backend: a.deps.Backend.Name(),
		Capabilities: &caps, Links: map[string]string{}, Event: event, Alarm: d.alarm, LastError: d.lastError,
	}
	if !a.local {
		s.Role, s.ProxyID = payload.RoleProxy, a.cfg.ProxyID
	}
	for _, p := range d.applied.Paths {
		s.AppliedWeights[p.WAT] = p.Weight
	}
	if cr, ok := a.deps.Backend.(backend.CapsReporter); ok && d.applied.Paths != nil && d.unexpr == nil {
		if caps := cr.AppliedCaps(d.id); len(caps) > 0 {
			s.AppliedCapsMbps = caps
		}
	}
	if cs := a.appliedClasses(d); len(cs) > 0 {
		s.AppliedClasses = cs
	}
	for w, l := range d.links {
		if payload.KnownWAT(w) {
			s.Links[w] = l
		}
	}
	if a.local {
		s.Addresses = map[string]string{}
		for w, sl := range d.slots {
			// An address no peer accepts as a CPE's own (loopback in a
			// lab, see payload.CheckWATAddr) would get the whole state
			// refused: the WAT is reported without one, as a WAT with no
			// address is.
			if sl.addr.IsValid() && payload.CheckWATAddr(sl.addr) == nil {
				s.Addresses[w] = sl.addr.String()
			}
		}
	}
	b, merr := s.Marshal()
	if merr != nil {
		a.deps.Log.Error("state not reported", "cpe_id", d.id, "err", merr)
		return
	}
	a.out.put(a.stateTopic(d.id), b, true)
}

// reportProxy queues the proxy's own state when it changed.
func (a *Agent) reportProxy() {
	applied := 0
	for _, d := range a.devs {
		if d.applied.Paths != nil && d.unexpr == nil && !d.safe {
			applied++
		}
	}
	ps := payload.ProxyState{
		ProxyID: a.cfg.ProxyID, Online: true, Backend: a.deps.Backend.Name(), Capabilities: a.caps,
		CPEs: len(a.devs), CPEsApplied: applied, Rules: a.rules, LastError: a.applyErr,
	}
	if len(ps.LastError) > payload.MaxErrorLen {
		ps.LastError = ps.LastError[:payload.MaxErrorLen]
	}
	// Compare without the time, so an unchanged proxy does not republish
	// on every message.
	key, _ := ps.Marshal()
	ps.TimeMs = a.deps.Now().UnixMilli()
	b, err := ps.Marshal()
	if err != nil {
		a.deps.Log.Error("proxy state not reported", "err", err)
		return
	}
	if a.lastProxyKey != nil && string(key) == string(a.lastProxyKey) {
		return
	}
	a.lastProxyKey = key
	a.out.put(a.pt.State(), b, true)
}
