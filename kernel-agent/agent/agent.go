// Package agent is the CPE agent's core: it takes weights updates from the
// channel, checks them (schema, CPE, version, lease), masks WATs whose link
// is down, applies the result through a backend, persists it and reports on
// the state topic; it falls back to safe weights when a lease runs out and
// streams per-WAT subflow telemetry.
//
// All decisions happen on one goroutine (the "loop" worker), so the agent's
// state needs no locks; the MQTT client hands payloads in through
// HandleWeights. The loop, the link watcher, the persister, the publisher
// and the telemetry sampler are workers of a supervisor (Workers), which
// notices when one dies or stalls.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/lease"
	"github.com/mcw-xapp/kernel-agent/linkwatch"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/payload"
	"github.com/mcw-xapp/kernel-agent/state"
	"github.com/mcw-xapp/kernel-agent/supervisor"
	"github.com/mcw-xapp/kernel-agent/telemetry"
)

// Publisher sends the agent's reports; mqttclient.Client implements it.
type Publisher interface {
	PublishState(ctx context.Context, b []byte) error
	PublishTelemetry(ctx context.Context, b []byte) error
}

// LinkSource reports the WAT interfaces' status; linkwatch.Watcher
// implements it.
type LinkSource interface {
	// Start subscribes to changes and returns the current status by
	// interface name.
	Start(ctx context.Context) (map[string]linkwatch.Status, error)
	// Run sends every change after Start on out until ctx ends (then it
	// returns nil) or the subscription fails; it calls beat at least once a
	// second while healthy.
	Run(ctx context.Context, out chan<- linkwatch.Status, beat func()) error
}

// SubflowSource dumps the kernel's TCP subflows; telemetry.Conn implements it.
type SubflowSource interface {
	Subflows() ([]telemetry.Subflow, error)
}

// Config is what the core needs from the configuration file.
type Config struct {
	CPEID string
	// WATs maps a WAT name to its interface.
	WATs        map[string]string
	SafeWeights payload.Weights
	// TelemetryInterval between samples; 0 disables telemetry.
	TelemetryInterval time.Duration
	// MPTCPOnly restricts telemetry to MPTCP subflows.
	MPTCPOnly bool
	// MaxClockSkew is how far a weights update's issue time may lie ahead
	// of this CPE's clock (see lease.Config); zero allows none.
	MaxClockSkew time.Duration
}

// How often the workers prove their progress, and how long each may go
// without doing so before the supervisor counts it as dead. The limits sit
// well above the slowest legitimate step: a backend apply takes
// milliseconds, a publish is bounded by its 10 s timeout, an fsync on slow
// flash by a few seconds.
const (
	beatEvery      = time.Second
	loopStall      = 10 * time.Second
	linksStall     = 10 * time.Second
	persisterStall = 30 * time.Second
	publisherStall = 30 * time.Second
	telemetryStall = 10 * time.Second // plus the interval
)

// Deps are the agent's collaborators. Backend, Store, Links, Metrics and
// Log are required; Subflows may be nil (no telemetry); Now defaults to
// time.Now.
type Deps struct {
	Backend  backend.Local
	Store    *state.Store
	Links    LinkSource
	Subflows SubflowSource
	Metrics  *metrics.Metrics
	Log      *slog.Logger
	Now      func() time.Time
}

// Agent is the core. Create it with New; call HandleWeights and
// Republish from any goroutine, Run once.
type Agent struct {
	cfg  Config
	deps Deps
	wats []string // configured WATs in canonical order

	updates   chan received
	republish chan struct{}
	states    chan []byte
	telem     chan []byte
	linkCh    chan linkwatch.Status
	started   chan struct{} // closed when Start has read the links

	// Owned by the loop goroutine (or by the caller of Start and
	// ProcessWeights when there is no loop).
	tracker   *lease.Tracker
	requested payload.Weights // xApp's (or safe) weights before link masking
	// caps are the ul caps_mbps of the requested set (nil: none, or safe
	// weights); a rate-caps backend uses them instead of its link rates.
	caps      map[string]float64
	safe      bool // requested are the safe weights
	mode      string
	links     map[string]linkwatch.Status
	applied   []backend.Path
	timer     *time.Timer
	lastError string

	mu        sync.Mutex
	lastState []byte                       // latest state payload, republished on reconnect
	linkInfo  map[string]telemetry.WATInfo // the links as the telemetry sampler needs them

	persistCh chan state.Record // latest-wins queue to the persister
	stall     stalls
}

// stalls are the workers' stall limits (constants, shortened by tests).
type stalls struct {
	loop, links, persister, publisher, telemetry time.Duration
}

type received struct {
	data []byte
	at   time.Time
}

// New checks cfg and deps and returns an Agent that has touched nothing yet.
func New(cfg Config, deps Deps) (*Agent, error) {
	if deps.Backend == nil || deps.Store == nil || deps.Links == nil || deps.Metrics == nil || deps.Log == nil {
		return nil, errors.New("agent: Backend, Store, Links, Metrics and Log are required")
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if err := cfg.SafeWeights.Validate(); err != nil {
		return nil, fmt.Errorf("agent: safe weights: %w", err)
	}
	var wats []string
	for _, w := range payload.WATs() {
		if _, ok := cfg.WATs[w]; ok {
			wats = append(wats, w)
		}
	}
	if len(wats) == 0 || len(wats) != len(cfg.WATs) {
		return nil, errors.New("agent: WATs must be a non-empty set of known WATs")
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &Agent{
		cfg:       cfg,
		deps:      deps,
		wats:      wats,
		updates:   make(chan received, 64),
		republish: make(chan struct{}, 1),
		states:    make(chan []byte, 64),
		telem:     make(chan []byte, 1),
		linkCh:    make(chan linkwatch.Status, 16),
		started:   make(chan struct{}),
		persistCh: make(chan state.Record, 1),
		tracker:   lease.New(lease.Config{MaxClockSkew: cfg.MaxClockSkew}),
		timer:     t,
		stall: stalls{loop: loopStall, links: linksStall, persister: persisterStall,
			publisher: publisherStall, telemetry: cfg.TelemetryInterval + telemetryStall},
	}, nil
}

// HandleWeights queues a weights payload received at at. It never blocks:
// when 64 payloads are already waiting the oldest wins and this one is
// dropped and counted (only the newest version matters, and the retained
// message brings it back on the next reconnect).
func (a *Agent) HandleWeights(data []byte, at time.Time) {
	select {
	case a.updates <- received{data: append([]byte(nil), data...), at: at}:
	default:
		a.deps.Metrics.Updates.WithLabelValues("dropped").Inc()
	}
}

// Republish asks the loop to publish the current state again (after a
// reconnect). It never blocks.
func (a *Agent) Republish() {
	select {
	case a.republish <- struct{}{}:
	default:
	}
}

// Start restores the persisted state, reads the WATs' links and applies
// the starting weights (restored ones while their lease runs, safe ones
// otherwise). The loop worker calls it first; benchmarks call it alone. It
// must be called once.
func (a *Agent) Start(ctx context.Context) error {
	initial, err := a.deps.Links.Start(ctx)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.links = map[string]linkwatch.Status{}
	for _, w := range a.wats {
		a.links[w] = initial[a.cfg.WATs[w]]
	}
	a.publishLinks()
	close(a.started)

	now := a.deps.Now()
	rec, ok, err := a.deps.Store.Load()
	if err != nil {
		a.deps.Log.Error("persisted state unusable, starting from safe weights", "err", err)
	}
	event := payload.EventStarted
	a.useSafe()
	if ok {
		inForce, kept := state.Resume(a.tracker, rec, now)
		if !kept {
			a.deps.Log.Warn("persisted mark issued beyond this CPE's clock, discarded", "version", rec.Version, "issued_at_ms", rec.IssuedAtMs)
		}
		if inForce {
			a.requested, a.safe, a.mode = rec.Weights.Clone(), false, rec.Mode
			a.caps = rec.CapsMbps
			a.timer.Reset(a.tracker.Remaining(now))
			event = payload.EventRestored
		}
		a.deps.Log.Info("state restored", "version", rec.Version, "lease_until_ms", rec.LeaseUntilMs, "event", event)
	}
	cause := map[string]string{payload.EventStarted: "start", payload.EventRestored: "restore"}[event]
	if err := a.applyRequested(ctx, cause, true); err != nil {
		a.report(event, err)
		return nil // keep running: a later update or link change may succeed
	}
	a.report(event, nil)
	return nil
}

// Workers returns the agent's long-lived goroutines for a supervisor:
// "loop" (Start, then every decision), "links" (the link watcher),
// "persister", "publisher" (when pub is not nil) and "telemetry" (when
// telemetry is configured). Each must run exactly once.
func (a *Agent) Workers(pub Publisher) []supervisor.Worker {
	ws := []supervisor.Worker{
		{Name: "loop", Run: a.runLoop, Stall: a.stall.loop},
		{Name: "links", Run: a.runLinks, Stall: a.stall.links},
		{Name: "persister", Run: a.RunPersister, Stall: a.stall.persister},
	}
	if pub != nil {
		ws = append(ws, supervisor.Worker{Name: "publisher", Stall: a.stall.publisher,
			Run: func(ctx context.Context, beat func()) error { return a.runPublisher(ctx, pub, beat) }})
	}
	if a.cfg.TelemetryInterval > 0 && a.deps.Subflows != nil {
		ws = append(ws, supervisor.Worker{Name: "telemetry", Run: a.runTelemetry, Stall: a.stall.telemetry})
	}
	return ws
}

// Run runs the agent's workers under a supervisor of its own until ctx
// ends (it returns nil) or a worker dies or stalls (it returns the
// supervisor's error). pub may be nil (no channel, e.g. in tests of the
// core). The agent binary puts the workers under its own supervisor
// instead, beside the MQTT and HTTP workers.
func (a *Agent) Run(ctx context.Context, pub Publisher) error {
	sup := supervisor.New(supervisor.Config{Log: a.deps.Log, OnChange: a.deps.Metrics.SetWorkerUp})
	for _, w := range a.Workers(pub) {
		sup.Add(w)
	}
	return sup.Run(ctx)
}

// runLoop is the decision loop: updates, link changes, lease expiry and
// republish requests meet here, one at a time.
func (a *Agent) runLoop(ctx context.Context, beat func()) error {
	if err := a.Start(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(beatEvery)
	defer tick.Stop()
	for {
		beat()
		select {
		case <-ctx.Done():
			return nil
		case u := <-a.updates:
			a.ProcessWeights(ctx, u.data, u.at)
		case s := <-a.linkCh:
			a.handleLink(ctx, s)
		case <-a.timer.C:
			a.expireLease(ctx)
		case <-a.republish:
			a.mu.Lock()
			b := a.lastState
			a.mu.Unlock()
			if b != nil {
				a.enqueueState(b)
			}
		case <-tick.C:
			// The timer runs on the monotonic clock, which stands still
			// while the CPE is suspended; the lease ends by the wall
			// clock, so check it here as well.
			if a.tracker.Active() && !a.deps.Now().Before(a.tracker.Until()) {
				a.expireLease(ctx)
			}
		}
	}
}

// runLinks runs the link watcher once Start has subscribed it.
func (a *Agent) runLinks(ctx context.Context, beat func()) error {
	if err := a.waitStarted(ctx, beat); err != nil {
		return nil
	}
	if err := a.deps.Links.Run(ctx, a.linkCh, beat); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

// waitStarted waits for Start, beating meanwhile (a slow Start is the
// loop's stall, not this worker's); it fails when ctx ends first.
func (a *Agent) waitStarted(ctx context.Context, beat func()) error {
	t := time.NewTicker(beatEvery)
	defer t.Stop()
	for {
		beat()
		select {
		case <-a.started:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// ProcessWeights handles one weights payload received at at: validate,
// check the version, apply, persist, report. It returns the reported event
// ("" for a silently ignored replay). Not safe for concurrent use with Run.
func (a *Agent) ProcessWeights(ctx context.Context, data []byte, at time.Time) string {
	m := a.deps.Metrics
	if len(data) == 0 {
		// The retained weights were cleared: no weights, as when the lease
		// runs out (the proxy does the same), not a rejected message.
		m.Updates.WithLabelValues("cleared").Inc()
		if !a.tracker.Active() {
			return ""
		}
		a.timer.Stop()
		a.expireLease(ctx)
		return payload.EventLeaseExpired
	}
	u, err := payload.ParseWeights(data, a.cfg.CPEID)
	if err != nil {
		m.Updates.WithLabelValues("invalid").Inc()
		a.deps.Log.Warn("weights rejected", "reason", err.Error())
		a.report(payload.EventRejected, err)
		return payload.EventRejected
	}
	now := a.deps.Now()
	lu := lease.Update{
		Version:  u.Version,
		IssuedAt: time.UnixMilli(u.IssuedAtMs),
		Lease:    time.Duration(u.LeaseS * float64(time.Second)),
	}
	until, err := a.tracker.Check(lu, now)
	switch {
	case errors.Is(err, lease.ErrReplay):
		// A retained message delivered again on reconnect: not news.
		m.Updates.WithLabelValues("replay").Inc()
		a.deps.Log.Debug("weights ignored", "reason", err.Error())
		return ""
	case err != nil:
		// Refused: nothing changes, not the mark and not the lease, so no
		// message can end or poison what is in force by being refused.
		m.Updates.WithLabelValues(lease.Result(err)).Inc()
		a.deps.Log.Warn("weights rejected", "reason", err.Error())
		a.report(payload.EventRejected, err)
		return payload.EventRejected
	}
	// An MPTCP scheduler decides at the sender: the CPE steers the uplink;
	// the dl set is the proxy's.
	ul := u.UL
	req := payload.Weights{}
	for _, w := range a.wats {
		req[w] = ul.Weights[w]
	}
	if req.AllZero() {
		err := fmt.Errorf("version %d: no configured WAT (%v) has a positive weight", u.Version, a.wats)
		m.Updates.WithLabelValues("invalid").Inc()
		a.report(payload.EventRejected, err)
		return payload.EventRejected
	}
	prev, prevSafe, prevMode, prevCaps := a.requested, a.safe, a.mode, a.caps
	a.requested, a.safe, a.mode, a.caps = req, false, ul.Mode, ul.CapsMbps
	if err := a.applyRequested(ctx, "update", true); err != nil {
		a.requested, a.safe, a.mode, a.caps = prev, prevSafe, prevMode, prevCaps
		m.Updates.WithLabelValues("apply_error").Inc()
		a.report(payload.EventRejected, err)
		return payload.EventRejected
	}
	m.UpdateSeconds.Observe(time.Since(at).Seconds())
	a.tracker.Grant(lu.Mark(), until)
	a.timer.Stop()
	a.timer.Reset(a.tracker.Remaining(now))
	m.Updates.WithLabelValues("applied").Inc()
	// Persist after the kernel write and off the loop (an fsync costs
	// milliseconds): a crash in between only means the retained update is
	// applied once more after restart.
	a.persist(now)
	a.deps.Log.Info("weights applied", "version", u.Version, "direction", payload.UL, "weights", req.String(), "mode", ul.Mode,
		"lease_s", u.LeaseS, "lease_until_ms", until.UnixMilli(), "reason", ul.Reason)
	a.report(payload.EventApplied, nil)
	return payload.EventApplied
}

// handleLink reacts to a WAT interface change: mask or unmask the WAT.
func (a *Agent) handleLink(ctx context.Context, s linkwatch.Status) {
	for _, w := range a.wats {
		if a.cfg.WATs[w] != s.Interface {
			continue
		}
		was, wasAddr := a.links[w].Usable(), a.links[w].Addr
		a.links[w] = s
		a.publishLinks()
		event := payload.EventLinkUp
		if !s.Usable() {
			event = payload.EventLinkDown
		}
		if was != s.Usable() {
			a.deps.Metrics.LinkEvents.WithLabelValues(w, map[bool]string{true: "up", false: "down"}[s.Usable()]).Inc()
		}
		err := a.applyRequested(ctx, "link", false)
		// A new address is news too: the proxy matches the CPE's downlink
		// subflows by the addresses in the state.
		if was != s.Usable() || wasAddr != s.Addr || err != nil {
			a.deps.Log.Info("link change", "wat", w, "interface", s.Interface, "usable", s.Usable(),
				"addr", s.Addr.String(), "weights", a.effectiveString())
			a.report(event, err)
		}
	}
}

// publishLinks hands the links to the telemetry sampler.
func (a *Agent) publishLinks() {
	info := make(map[string]telemetry.WATInfo, len(a.wats))
	for _, w := range a.wats {
		info[w] = telemetry.WATInfo{Addr: a.links[w].Addr, Up: a.links[w].Usable()}
	}
	a.mu.Lock()
	a.linkInfo = info
	a.mu.Unlock()
}

// expireLease falls back to the safe weights.
func (a *Agent) expireLease(ctx context.Context) {
	if !a.tracker.Active() {
		return
	}
	a.tracker.Expire()
	a.deps.Metrics.LeaseExpiries.Inc()
	a.useSafe()
	err := a.applyRequested(ctx, "safe", true)
	a.persist(a.deps.Now())
	a.deps.Log.Warn("lease expired, safe weights in force", "weights", a.effectiveString())
	a.report(payload.EventLeaseExpired, err)
}

func (a *Agent) useSafe() {
	a.requested, a.safe, a.mode, a.caps = a.cfg.SafeWeights.Clone(), true, "", nil
}

// effective masks the requested weights with the links: a WAT whose link is
// not usable gets 0. When that leaves nothing, the safe weights of the
// usable WATs stand in (for example the only active WAT of an
// active_standby update went down: the standby takes over); requested
// tells which.
func (a *Agent) effective() (eff payload.Weights, requested bool, err error) {
	mask := func(w payload.Weights) payload.Weights {
		out := payload.Weights{}
		for _, n := range a.wats {
			if a.links[n].Usable() {
				out[n] = w[n]
			} else {
				out[n] = 0
			}
		}
		return out
	}
	eff = mask(a.requested)
	if !eff.AllZero() {
		return eff, true, nil
	}
	eff = mask(a.cfg.SafeWeights)
	if eff.AllZero() {
		return nil, false, errors.New("no usable WAT: kernel left unchanged")
	}
	return eff, false, nil
}

func (a *Agent) effectiveString() string {
	if eff, _, err := a.effective(); err == nil {
		return eff.String()
	}
	return "none"
}

// applyRequested applies the effective weights; unless force, it skips the
// backend when nothing (weights, addresses) changed.
func (a *Agent) applyRequested(ctx context.Context, cause string, force bool) error {
	eff, requested, err := a.effective()
	if err != nil {
		return err
	}
	paths := make([]backend.Path, 0, len(a.wats))
	for _, w := range a.wats {
		l := a.links[w]
		p := backend.Path{WAT: w, Interface: a.cfg.WATs[w], Index: l.Index, Addr: l.Addr, Weight: eff[w]}
		// The message's caps belong to its weights: not to the safe
		// weights standing in for them.
		if requested {
			p.CapMbps = a.caps[w]
		}
		paths = append(paths, p)
	}
	if !force && slices.Equal(paths, a.applied) {
		return nil
	}
	t0 := time.Now()
	err = a.deps.Backend.Apply(ctx, paths)
	a.deps.Metrics.ApplySeconds.Observe(time.Since(t0).Seconds())
	if err != nil {
		a.deps.Metrics.ApplyErrors.Inc()
		a.applied = nil // unknown kernel state: the next change re-applies
		a.deps.Log.Error("apply failed", "cause", cause, "err", err)
		return err
	}
	a.applied = paths
	a.deps.Metrics.Applies.WithLabelValues(cause).Inc()
	for _, p := range paths {
		a.deps.Metrics.Weight.WithLabelValues(p.WAT).Set(float64(p.Weight))
	}
	if a.safe {
		a.deps.Metrics.AppliedVersion.Set(0)
	} else {
		a.deps.Metrics.AppliedVersion.Set(float64(a.tracker.Version()))
	}
	return nil
}

func (a *Agent) persist(now time.Time) {
	var requested payload.Weights
	if !a.safe {
		requested = a.requested
	}
	rec := state.Snapshot(a.tracker, requested, a.mode, a.caps, now)
	// Latest wins: an older record still queued is replaced.
	select {
	case <-a.persistCh:
	default:
	}
	a.persistCh <- rec
}

// RunPersister writes the records the loop queues until ctx ends, then
// the last one still queued; it is the "persister" worker (benchmarks that
// call Start and ProcessWeights alone run it themselves).
func (a *Agent) RunPersister(ctx context.Context, beat func()) error {
	save := func(rec state.Record) {
		if err := a.deps.Store.Save(rec); err != nil {
			a.deps.Log.Error("persist failed", "err", err)
		}
	}
	t := time.NewTicker(beatEvery)
	defer t.Stop()
	for {
		beat()
		select {
		case <-t.C:
		case rec := <-a.persistCh:
			save(rec)
		case <-ctx.Done():
			select {
			case rec := <-a.persistCh:
				save(rec)
			default:
			}
			return nil
		}
	}
}

// report builds the state payload and queues it for publishing.
func (a *Agent) report(event string, err error) {
	if err != nil {
		a.lastError = err.Error()
		if len(a.lastError) > 1024 {
			a.lastError = a.lastError[:1024]
		}
	} else if event != payload.EventRejected {
		a.lastError = ""
	}
	caps := payload.CapabilitiesOf(a.deps.Backend.Name(), a.deps.Backend.Capabilities())
	s := payload.State{
		CPEID:          a.cfg.CPEID,
		Online:         true,
		Role:           payload.RoleCPE,
		Direction:      payload.UL,
		TimeMs:         a.deps.Now().UnixMilli(),
		AppliedWeights: payload.Weights{},
		Addresses:      map[string]string{},
		Backend:        a.deps.Backend.Name(),
		Capabilities:   &caps,
		Links:          map[string]string{},
		Event:          event,
		LastError:      a.lastError,
	}
	if !a.safe {
		s.AppliedVersion = a.tracker.Version()
	}
	for _, p := range a.applied {
		s.AppliedWeights[p.WAT] = p.Weight
	}
	if cr, ok := a.deps.Backend.(backend.LocalCapsReporter); ok && a.applied != nil {
		if caps := cr.AppliedCaps(); len(caps) > 0 {
			s.AppliedCapsMbps = caps
		}
	}
	for _, w := range a.wats {
		s.Links[w] = map[bool]string{true: "up", false: "down"}[a.links[w].Usable()]
		// An address no peer accepts as a CPE's own (loopback in a lab,
		// see payload.CheckWATAddr) would get the whole state refused: the
		// WAT is reported without one, as a WAT with no address is.
		if addr := a.links[w].Addr; addr.IsValid() && payload.CheckWATAddr(addr) == nil {
			s.Addresses[w] = addr.String()
		}
	}
	b, merr := s.Marshal()
	if merr != nil {
		a.deps.Log.Error("state not reported", "err", merr)
		return
	}
	a.mu.Lock()
	a.lastState = b
	a.mu.Unlock()
	a.enqueueState(b)
}

func (a *Agent) enqueueState(b []byte) {
	select {
	case a.states <- b:
	default:
		a.deps.Metrics.PublishErrors.WithLabelValues("state").Inc()
	}
}

// LastState returns the latest state payload (nil before Start).
func (a *Agent) LastState() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastState
}

// runTelemetry samples the subflows every interval, off the loop: a slow
// sock_diag dump never delays a kernel write.
func (a *Agent) runTelemetry(ctx context.Context, beat func()) error {
	if err := a.waitStarted(ctx, beat); err != nil {
		return nil
	}
	agg := telemetry.Aggregator{MPTCPOnly: a.cfg.MPTCPOnly}
	t := time.NewTicker(a.cfg.TelemetryInterval)
	defer t.Stop()
	for {
		beat()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			a.sampleTelemetry(&agg)
		}
	}
}

func (a *Agent) sampleTelemetry(agg *telemetry.Aggregator) {
	subs, err := a.deps.Subflows.Subflows()
	if err != nil {
		a.deps.Log.Warn("telemetry sample failed", "err", err)
		return
	}
	now := a.deps.Now()
	a.mu.Lock()
	info := a.linkInfo
	a.mu.Unlock()
	t := payload.Telemetry{
		CPEID:      a.cfg.CPEID,
		TimeMs:     now.UnixMilli(),
		IntervalMs: a.cfg.TelemetryInterval.Milliseconds(),
		WATs:       agg.Sample(now, subs, info),
	}
	b, err := t.Marshal()
	if err != nil {
		a.deps.Log.Error("telemetry not reported", "err", err)
		return
	}
	select {
	case a.telem <- b:
	default: // the publisher is behind: drop, the next sample supersedes it
		a.deps.Metrics.PublishErrors.WithLabelValues("telemetry").Inc()
	}
}

// runPublisher sends queued reports so that a slow broker never delays
// the kernel path; each publish is bounded by a timeout.
func (a *Agent) runPublisher(ctx context.Context, pub Publisher, beat func()) error {
	t := time.NewTicker(beatEvery)
	defer t.Stop()
	for {
		beat()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil
		case b := <-a.states:
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := pub.PublishState(pctx, b); err != nil && ctx.Err() == nil {
				a.deps.Metrics.PublishErrors.WithLabelValues("state").Inc()
				a.deps.Log.Debug("state not published (republished on reconnect)", "err", err)
			}
			cancel()
		case b := <-a.telem:
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := pub.PublishTelemetry(pctx, b); err != nil && ctx.Err() == nil {
				a.deps.Metrics.PublishErrors.WithLabelValues("telemetry").Inc()
			}
			cancel()
		}
	}
}
