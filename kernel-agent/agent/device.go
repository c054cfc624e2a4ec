package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/lease"
	"github.com/mcw-xapp/kernel-agent/linkwatch"
	"github.com/mcw-xapp/kernel-agent/payload"
	"github.com/mcw-xapp/kernel-agent/state"
)

// device is one CPE's applier: its lease and versions, the weights in
// force, its paths (one per WAT it has an address for) and what to report.
// The CPE role has one (this host), the proxy role one per served CPE.
type device struct {
	id      string
	store   *state.Store
	tracker *lease.Tracker
	safeW   payload.Weights

	requested payload.Weights // the set in force (or the safe weights) before link masking
	// caps are the set's caps_mbps (nil: none, or safe weights); a
	// rate-caps backend uses them instead of its link rates.
	caps map[string]float64
	// classes are the set's traffic classes (nil: none, or safe weights).
	classes []payload.Class
	safe    bool // requested are the safe weights
	mode    string
	pending *pending // accepted, being applied with the next set

	// configured are the WATs the device is configured with (role cpe);
	// nil: the WATs its agent reports addresses for.
	configured []string
	slots      map[string]slot   // per WAT: where its path goes
	links      map[string]string // per WAT: up or down, as reported
	online     bool
	// sharded: the CPE agent's state came on its sharded topic, so what
	// comes on its legacy topic is ignored (role proxy).
	sharded bool

	applied backend.Device // in the kernel (Paths nil: nothing for this device)
	// limits hold the WATs of applied (Agent.ownLimits), as last handed
	// to the telemetry sampler.
	limits map[string]ownLimit
	// want and wantErr cache plan() until the device changes: a proxy
	// serving a thousand CPEs recomputes only the one that changed.
	want      backend.Device
	wantErr   error
	changed   bool
	unexpr    error  // why the device is not in the kernel as requested
	alarm     string // payload.AlarmAddressConflict while another CPE claims one of its addresses
	lastError string
	event     string // to report after the next apply ("" nothing)
	eventErr  error
}

// slot is one WAT's path: role cpe, the interface (index, address, usable
// when up, running and addressed); role proxy, the CPE's address for it
// (usable unless the CPE reports its link down).
type slot struct {
	iface  string
	index  int
	addr   netip.Addr
	usable bool
}

// pending is an update accepted by the version and lease checks (staged in
// the tracker), granted once the backend applied it, rolled back when the
// backend failed.
type pending struct {
	mark    lease.Mark
	until   time.Time
	at      time.Time
	version int64
	note    string
	prev    weightsInForce
}

type weightsInForce struct {
	requested payload.Weights
	caps      map[string]float64
	classes   []payload.Class
	safe      bool
	mode      string
}

func newDevice(id, dir string, skew time.Duration, safe payload.Weights) (*device, error) {
	store, err := state.New(dir)
	if err != nil {
		return nil, err
	}
	d := &device{id: id, store: store, tracker: lease.New(lease.Config{MaxClockSkew: skew}), safeW: safe,
		slots: map[string]slot{}, links: map[string]string{}, changed: true}
	d.useSafe()
	return d, nil
}

func (d *device) inForce() weightsInForce {
	return weightsInForce{requested: d.requested, caps: d.caps, classes: d.classes, safe: d.safe, mode: d.mode}
}

func (d *device) set(w weightsInForce) {
	d.requested, d.caps, d.classes, d.safe, d.mode = w.requested, w.caps, w.classes, w.safe, w.mode
}

func (d *device) useSafe() {
	d.set(weightsInForce{requested: d.safeW.Clone(), safe: true})
}

// setLocal takes the status of iface, one of this host's WAT interfaces
// (role cpe; the zero status while it does not exist); it reports whether
// anything a path depends on changed.
func (d *device) setLocal(wat, iface string, s linkwatch.Status) bool {
	sl := slot{iface: iface, index: s.Index, addr: s.Addr, usable: s.Usable()}
	old, had := d.slots[wat]
	d.slots[wat] = sl
	d.links[wat] = map[bool]string{true: "up", false: "down"}[sl.usable]
	return !had || old != sl
}

// record is what the persister saves of d.
func (d *device) record(now time.Time) state.Record {
	var requested payload.Weights
	if !d.safe {
		requested = d.requested
	}
	return state.Snapshot(d.tracker, requested, d.mode, d.caps, d.classes, now)
}

// setEvent records what to report for d after the next apply; a weights
// decision outranks a link change in the same batch.
func (d *device) setEvent(ev string, err error) {
	if d.event != "" && ev != payload.EventApplied && ev != payload.EventRejected &&
		(d.event == payload.EventApplied || d.event == payload.EventRejected) {
		return
	}
	d.event, d.eventErr = ev, err
}

// errNoAddress: the CPE agent has not (yet) reported any WAT address.
var errNoAddress = errors.New("no WAT address of this CPE known (its agent's state has none yet): not steered")

// plan returns what the backend is handed for d: its paths and its
// classes on them.
func (d *device) plan() (backend.Device, error) {
	ps, err := d.paths()
	if err != nil {
		return backend.Device{}, err
	}
	return backend.Device{CPEID: d.id, Paths: ps, Classes: d.classesOn(ps)}, nil
}

// classesOn resolves d's classes on its paths ps: each class's weights
// masked by the links as the direction's are (a WAT not usable gets 0),
// with its caps on the WATs it still uses. A class left without a usable
// WAT of its own takes the default rule's weights on ps (the direction's,
// as masked), without caps of its own: its traffic then fares as traffic
// no class takes, rather than being held at a backend's floor on the
// WATs that are up. Urgent stays: it is the class's, not a WAT's.
func (d *device) classesOn(ps []backend.Path) []backend.Class {
	if len(d.classes) == 0 {
		return nil
	}
	out := make([]backend.Class, 0, len(d.classes))
	for _, c := range d.classes {
		w, caps, used := payload.Weights{}, map[string]float64{}, false
		for _, p := range ps {
			v := c.Weights[p.WAT]
			if !d.slots[p.WAT].usable {
				v = 0
			}
			w[p.WAT] = v
			if v > 0 {
				used = true
				if cp, ok := c.CapsMbps[p.WAT]; ok {
					caps[p.WAT] = cp
				}
			}
		}
		if !used {
			for _, p := range ps {
				w[p.WAT] = p.Weight
			}
			clear(caps)
		}
		if len(caps) == 0 {
			caps = nil
		}
		out = append(out, backend.Class{Name: c.Name, Match: c.Match, Urgent: c.Urgent, Weights: w, CapsMbps: caps})
	}
	return out
}

// paths returns d's paths in canonical WAT order, masked by the links: a
// WAT that is not usable gets 0; when that leaves nothing, the safe
// weights of the usable WATs stand in (for example the only active WAT of
// an active_standby update went down: the standby takes over); never all
// zero.
func (d *device) paths() ([]backend.Path, error) {
	if len(d.slots) == 0 {
		return nil, errNoAddress
	}
	mask := func(w payload.Weights, caps map[string]float64) []backend.Path {
		out := make([]backend.Path, 0, len(d.slots))
		for _, wat := range payload.WATs() {
			sl, ok := d.slots[wat]
			if !ok {
				continue
			}
			weight := w[wat]
			if !sl.usable {
				weight = 0
			}
			out = append(out, backend.Path{WAT: wat, Interface: sl.iface, Index: sl.index, Addr: sl.addr, Weight: weight, CapMbps: caps[wat], Down: !sl.usable})
		}
		return out
	}
	positive := func(ps []backend.Path) bool {
		return slices.ContainsFunc(ps, func(p backend.Path) bool { return p.Weight > 0 })
	}
	eff := mask(d.requested, d.caps)
	if !positive(eff) {
		// The message's caps belong to its weights, not to the safe
		// weights standing in for them.
		eff = mask(d.safeW, nil)
	}
	if !positive(eff) {
		return nil, errors.New("no usable WAT (up, with an address): kernel left unchanged")
	}
	return eff, nil
}

// onWeights judges one weights payload for d: the lease and version rule
// (package lease) is applied here, once for both roles. An accepted update
// is staged and applied with the next set (Grant after the kernel write);
// a refused one changes nothing, not the mark and not the lease, so no
// message can end or poison what is in force by being refused.
func (a *Agent) onWeights(d *device, data []byte, at time.Time) {
	m := a.deps.Metrics
	now := a.deps.Now()
	if len(data) == 0 {
		// The retained weights were cleared: no weights, as when the lease
		// runs out.
		m.Updates.WithLabelValues("cleared").Inc()
		if d.tracker.Active() || d.pending != nil {
			a.endLease(d, now)
		}
		return
	}
	u, err := payload.ParseWeights(data, d.id)
	if err != nil {
		m.Updates.WithLabelValues("invalid").Inc()
		a.deps.Log.Warn("weights rejected", "cpe_id", d.id, "reason", err.Error())
		d.setEvent(payload.EventRejected, err)
		return
	}
	lu := lease.Update{Version: u.Version, IssuedAt: time.UnixMilli(u.IssuedAtMs), Lease: time.Duration(u.LeaseS * float64(time.Second))}
	until, err := d.tracker.Check(lu, now)
	switch {
	case errors.Is(err, lease.ErrReplay):
		// A retained message delivered again on reconnect: not news.
		m.Updates.WithLabelValues("replay").Inc()
		a.deps.Log.Debug("weights ignored", "cpe_id", d.id, "reason", err.Error())
		return
	case err != nil:
		m.Updates.WithLabelValues(lease.Result(err)).Inc()
		a.deps.Log.Warn("weights rejected", "cpe_id", d.id, "reason", err.Error())
		d.setEvent(payload.EventRejected, err)
		return
	}
	// An MPTCP scheduler decides at the sender: the CPE steers the uplink,
	// the proxy the downlink.
	set := u.Dir(a.dir)
	req := set.Weights.Clone()
	if d.configured != nil {
		req = payload.Weights{}
		for _, w := range d.configured {
			req[w] = set.Weights[w]
		}
		if req.AllZero() {
			m.Updates.WithLabelValues("invalid").Inc()
			d.setEvent(payload.EventRejected, fmt.Errorf("version %d: no configured WAT (%v) has a positive weight", u.Version, d.configured))
			return
		}
	}
	classes, err := a.acceptClasses(d, set.Classes)
	if err != nil {
		m.Updates.WithLabelValues("invalid").Inc()
		a.deps.Log.Warn("weights rejected", "cpe_id", d.id, "reason", err.Error())
		d.setEvent(payload.EventRejected, fmt.Errorf("version %d: %w", u.Version, err))
		return
	}
	if d.pending == nil {
		d.pending = &pending{prev: d.inForce()}
	}
	d.pending.mark, d.pending.until, d.pending.at = lu.Mark(), until, at
	d.pending.version, d.pending.note = u.Version, set.Reason
	d.tracker.Stage(lu.Mark())
	d.set(weightsInForce{requested: req, caps: set.CapsMbps, classes: classes, mode: set.Mode})
	a.touch(d, "update", true)
	d.setEvent(payload.EventApplied, nil)
}

// acceptClasses judges a direction's classes for d: no more than the
// backend's capabilities.max_classes, weights restricted to the WATs d is
// configured with (role cpe) with one of them positive, and nothing the
// backend says it cannot express. It returns the classes to apply.
func (a *Agent) acceptClasses(d *device, classes []payload.Class) ([]payload.Class, error) {
	if len(classes) == 0 {
		return nil, nil
	}
	if n, most := len(classes), a.caps.MaxClasses; n > most {
		return nil, fmt.Errorf("%w: %s.classes: %d traffic classes, but this agent's capabilities.max_classes is %d (backend %s)",
			payload.ErrInvalid, a.dir, n, most, a.deps.Backend.Name())
	}
	out := slices.Clone(classes)
	if d.configured != nil {
		for i, c := range out {
			w := payload.Weights{}
			for _, wat := range d.configured {
				w[wat] = c.Weights[wat]
			}
			if w.AllZero() {
				return nil, fmt.Errorf("%w: %s.classes[%s]: no configured WAT (%v) has a positive weight", payload.ErrInvalid, a.dir, c.Name, d.configured)
			}
			out[i].Weights = w
		}
	}
	if cc, ok := a.deps.Backend.(backend.ClassChecker); ok {
		if err := cc.CheckClasses(out); err != nil {
			return nil, fmt.Errorf("%s.classes: %w", a.dir, err)
		}
	}
	return out, nil
}

// settle ends d's pending update by the backend's result: granted (its
// lease starts, it is persisted) or rolled back (forgotten, so that its
// redelivery is judged afresh).
func (a *Agent) settle(d *device, applyErr error) {
	pu := d.pending
	if pu == nil {
		return
	}
	d.pending = nil
	m := a.deps.Metrics
	if applyErr != nil {
		d.tracker.Abort()
		d.set(pu.prev)
		d.changed = true
		m.Updates.WithLabelValues("apply_error").Inc()
		d.event, d.eventErr = "", nil
		d.setEvent(payload.EventRejected, applyErr)
		return
	}
	d.tracker.Grant(pu.mark, pu.until)
	m.Updates.WithLabelValues("applied").Inc()
	if d.unexpr == nil {
		m.UpdateSeconds.Observe(time.Since(pu.at).Seconds())
	}
	// Persist after the kernel write and off the loop (an fsync costs
	// milliseconds): a crash in between only means the retained update is
	// applied once more after restart.
	a.save(d, a.deps.Now())
	a.deps.Log.Info("weights applied", "cpe_id", d.id, "version", pu.version, "direction", a.dir,
		"weights", d.requested.String(), "mode", d.mode, "classes", len(d.classes), "lease_until_ms", pu.until.UnixMilli(),
		"reason", pu.note, "in_kernel", d.unexpr == nil)
}

// endLease puts d on the safe weights: its lease ran out or its weights
// were withdrawn (an update being applied is dropped with it).
func (a *Agent) endLease(d *device, now time.Time) {
	d.tracker.Expire()
	d.tracker.Abort()
	d.pending = nil
	a.deps.Metrics.LeaseExpiries.Inc()
	d.useSafe()
	a.touch(d, "safe", true)
	a.save(d, now)
	a.deps.Log.Warn("lease ended, safe weights in force", "cpe_id", d.id)
	d.setEvent(payload.EventLeaseExpired, nil)
}

// restore resumes d's persisted record; it reports whether a lease was
// still running.
func (a *Agent) restore(d *device, now time.Time) bool {
	d.event = payload.EventStarted
	rec, ok, err := d.store.Load()
	if err != nil {
		a.deps.Log.Error("persisted state unusable, starting from safe weights", "cpe_id", d.id, "err", err)
	}
	if !ok {
		return false
	}
	inForce, kept := state.Resume(d.tracker, rec, now)
	if !kept {
		a.deps.Log.Warn("persisted mark issued beyond this device's clock, discarded", "cpe_id", d.id,
			"version", rec.Version, "issued_at_ms", rec.IssuedAtMs)
	}
	a.deps.Log.Info("state restored", "cpe_id", d.id, "version", rec.Version, "lease_until_ms", rec.LeaseUntilMs, "in_force", inForce)
	if !inForce {
		return false
	}
	d.set(weightsInForce{requested: rec.Weights.Clone(), caps: rec.CapsMbps, classes: rec.Classes, mode: rec.Mode})
	d.event = payload.EventRestored
	return true
}

// save queues d's record for the persister (latest wins per device).
func (a *Agent) save(d *device, now time.Time) {
	a.persist.put(d.id, persistItem{store: d.store, rec: d.record(now)})
}
