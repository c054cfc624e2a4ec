// Package proxy is the agent's proxy role: beside an MPTCP proxy that sends
// the downlink to many CPEs, it applies each CPE's dl weights through a
// backend.Backend. It reads every served CPE's weights (the dl set) and
// its agent's retained state (the addresses of the CPE's WATs, which are
// the remote addresses of the downlink subflows, and which links are
// down), and applies per CPE the CPE agent's rules: versions grow
// (persisted per CPE), a lease ends in safe weights, a link the CPE reports
// down gets 0, never all zero.
//
// One goroutine (the "loop" worker) owns every CPE's state and hands the
// whole served set to Downlink.ApplyAll after each batch of messages: the
// kernels' rules are global (one WRR tuple list) or per connection, and
// CPEs come and go. Input for one CPE only ever changes that CPE's entry.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/lease"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/mqttclient"
	"github.com/mcw-xapp/kernel-agent/payload"
	"github.com/mcw-xapp/kernel-agent/state"
	"github.com/mcw-xapp/kernel-agent/supervisor"
	"github.com/mcw-xapp/kernel-agent/telemetry"
)

// Publisher sends the proxy's reports; mqttclient.Client implements it.
type Publisher interface {
	PublishRetained(ctx context.Context, topic string, b []byte) error
	PublishQoS0(ctx context.Context, topic string, b []byte) error
}

// SubflowSource dumps the kernel's TCP subflows; telemetry.Conn implements it.
type SubflowSource interface {
	Subflows() ([]telemetry.Subflow, error)
}

// Config is what the proxy needs from the configuration file.
type Config struct {
	ProxyID string
	// CPEs are the served CPEs' ids.
	CPEs []string
	// SafeWeights apply to a CPE's downlink without a running lease (keys
	// the CPE has no address for are ignored).
	SafeWeights payload.Weights
	// StateDir holds one directory per served CPE (cpe/{id}/).
	StateDir string
	// TelemetryInterval between samples; 0 disables telemetry.
	TelemetryInterval time.Duration
	MPTCPOnly         bool
	// MaxClockSkew: see lease.Config.
	MaxClockSkew time.Duration
	// Prefixes is the operator's registry: a CPE listed here may only
	// claim WAT addresses within its prefixes (nil: no registry).
	Prefixes map[string][]netip.Prefix
}

// Deps are the proxy's collaborators; Subflows may be nil (no telemetry),
// Now defaults to time.Now.
type Deps struct {
	Downlink backend.Backend
	Subflows SubflowSource
	Metrics  *metrics.Metrics
	Log      *slog.Logger
	Now      func() time.Time
}

// Worker limits, as the CPE agent's (see agent).
const (
	beatEvery      = time.Second
	loopStall      = 10 * time.Second
	persisterStall = 30 * time.Second
	publisherStall = 30 * time.Second
	telemetryStall = 10 * time.Second // plus the interval
	// drainMax bounds how many queued messages one apply batches, so a
	// flood of one CPE's messages cannot hold the others' back for long.
	drainMax = 256
)

// Proxy is the proxy role's core. Create it with New; call HandleMessage
// and Republish from any goroutine; run its Workers once.
type Proxy struct {
	cfg    Config
	deps   Deps
	topics mqttclient.ProxyTopics
	caps   payload.Capabilities

	inbox     chan message
	republish chan struct{}
	started   chan struct{}

	// Owned by the loop goroutine.
	cpes      map[string]*cpe
	order     []string // cfg.CPEs
	timer     *time.Timer
	dirty     bool   // the served set must be applied again
	applyErr  string // the last ApplyAll's error, for the proxy state
	rules     payload.Rules
	lastProxy []byte
	// lastProxyKey is lastProxy without its time, to tell a change.
	lastProxyKey []byte

	out     outbox
	persist persistQueue

	mu       sync.Mutex
	addrInfo map[string]map[string]telemetry.WATInfo // per CPE, for the telemetry sampler
}

type message struct {
	topic string
	data  []byte
	at    time.Time
}

// cpe is one served CPE's downlink state.
type cpe struct {
	id      string
	store   *state.Store
	tracker *lease.Tracker

	requested payload.Weights // the dl set in force (or safe weights) before link masking
	// caps are the dl set's caps_mbps (nil: none, or safe weights); a
	// rate-caps downlink uses them instead of its link rates.
	caps    map[string]float64
	safe    bool
	mode    string
	pending *pendingUpdate // accepted, waiting for the next ApplyAll

	addrs  map[string]netip.Addr // the CPE agent's WAT addresses
	links  map[string]string     // the CPE agent's links (up/down)
	online bool

	applied []backend.Path // in the kernel (nil: nothing for this CPE)
	// want and wantErr cache paths() until the CPE changes (touch): a
	// proxy serving a thousand CPEs recomputes only the one that changed.
	want      []backend.Path
	wantErr   error
	changed   bool
	unexpr    error  // why the CPE is not in the kernel as requested
	alarm     string // payload.AlarmAddressConflict while another CPE claims one of its addresses
	lastError string
	event     string // to report after the next apply ("" nothing)
	eventErr  error
	lastState []byte
}

// pendingUpdate is an update accepted by the version and lease checks; it
// is granted once the backend applied it, rolled back when it failed.
type pendingUpdate struct {
	version   int64
	until     time.Time
	at        time.Time
	note      string
	prev      payload.Weights
	prevCaps  map[string]float64
	prevSafe  bool
	prevMode  string
	prevMark  lease.Mark
	prevUntil time.Time // zero: no lease was running
}

// overflowCounter is a downlink that tells the CPEs it left out for its rule
// bound from those it could not express for other reasons (wrr-sysctl);
// otherwise every CPE not applied counts as overflow.
type overflowCounter interface {
	OverflowCPEs() int
}

// New checks cfg and deps and returns a Proxy that has touched nothing.
func New(cfg Config, deps Deps) (*Proxy, error) {
	if deps.Downlink == nil || deps.Metrics == nil || deps.Log == nil {
		return nil, errors.New("proxy: Downlink, Metrics and Log are required")
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if !payload.ValidCPEID(cfg.ProxyID) {
		return nil, fmt.Errorf("proxy: invalid proxy_id %q", cfg.ProxyID)
	}
	if len(cfg.CPEs) == 0 {
		return nil, errors.New("proxy: no CPE to serve")
	}
	seen := map[string]bool{}
	for _, id := range cfg.CPEs {
		if !payload.ValidCPEID(id) || seen[id] {
			return nil, fmt.Errorf("proxy: CPE id %q invalid or repeated", id)
		}
		seen[id] = true
	}
	if err := cfg.SafeWeights.Validate(); err != nil {
		return nil, fmt.Errorf("proxy: safe weights: %w", err)
	}
	if cfg.StateDir == "" {
		return nil, errors.New("proxy: state directory required")
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &Proxy{
		cfg:       cfg,
		deps:      deps,
		topics:    mqttclient.ProxyTopicsFor(cfg.ProxyID),
		caps:      payload.CapabilitiesOf(deps.Downlink.Name(), deps.Downlink.Capabilities()),
		inbox:     make(chan message, 2*len(cfg.CPEs)+64), // every retained message at connect fits
		republish: make(chan struct{}, 1),
		started:   make(chan struct{}),
		order:     slices.Clone(cfg.CPEs),
		timer:     t,
		out:       newOutbox(),
		persist:   newPersistQueue(),
		addrInfo:  map[string]map[string]telemetry.WATInfo{},
	}, nil
}

// Subscriptions returns the topics the proxy reads: each served CPE's
// weights and its agent's state.
func (p *Proxy) Subscriptions() []string {
	out := make([]string, 0, 2*len(p.order))
	for _, id := range p.order {
		t := mqttclient.TopicsFor(id)
		out = append(out, t.Weights, t.State)
	}
	return out
}

// HandleMessage queues a message received at at; it never blocks (a full
// queue drops and counts it: the retained message comes back on reconnect).
func (p *Proxy) HandleMessage(topic string, data []byte, at time.Time) {
	select {
	case p.inbox <- message{topic: topic, data: append([]byte(nil), data...), at: at}:
	default:
		p.deps.Metrics.Updates.WithLabelValues("dropped").Inc()
	}
}

// Republish asks the loop to publish every state again (after a reconnect).
func (p *Proxy) Republish() {
	select {
	case p.republish <- struct{}{}:
	default:
	}
}

// Workers returns the proxy's long-lived goroutines: "loop", "persister",
// "publisher" (when pub is not nil) and "telemetry" (when configured).
func (p *Proxy) Workers(pub Publisher) []supervisor.Worker {
	ws := []supervisor.Worker{
		{Name: "loop", Run: p.runLoop, Stall: loopStall},
		{Name: "persister", Run: p.runPersister, Stall: persisterStall},
	}
	if pub != nil {
		ws = append(ws, supervisor.Worker{Name: "publisher", Stall: publisherStall,
			Run: func(ctx context.Context, beat func()) error { return p.runPublisher(ctx, pub, beat) }})
	}
	if p.cfg.TelemetryInterval > 0 && p.deps.Subflows != nil {
		ws = append(ws, supervisor.Worker{Name: "telemetry", Run: p.runTelemetry, Stall: p.cfg.TelemetryInterval + telemetryStall})
	}
	return ws
}

// Run runs the workers under a supervisor of their own (tests; the binary
// adds them to its supervisor beside MQTT and HTTP).
func (p *Proxy) Run(ctx context.Context, pub Publisher) error {
	sup := supervisor.New(supervisor.Config{Log: p.deps.Log, OnChange: p.deps.Metrics.SetWorkerUp})
	for _, w := range p.Workers(pub) {
		sup.Add(w)
	}
	return sup.Run(ctx)
}

// Start restores every CPE's persisted state, clears what the proxy
// published for CPEs it no longer serves, and applies the served set
// (empty until the CPE agents' addresses arrive: this removes the rules of
// CPEs no longer served). The loop calls it first.
func (p *Proxy) Start(ctx context.Context) error {
	p.cpes = make(map[string]*cpe, len(p.order))
	now := p.deps.Now()
	for _, id := range p.order {
		store, err := state.New(filepath.Join(p.cfg.StateDir, "cpe", id))
		if err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
		c := &cpe{id: id, store: store, tracker: lease.New(lease.Config{MaxClockSkew: p.cfg.MaxClockSkew}),
			addrs: map[string]netip.Addr{}, links: map[string]string{}, changed: true}
		c.useSafe(p.cfg.SafeWeights)
		event := payload.EventStarted
		rec, ok, err := store.Load()
		if err != nil {
			p.deps.Log.Error("persisted state unusable, starting from safe weights", "cpe_id", id, "err", err)
		}
		if ok {
			inForce, kept := state.Resume(c.tracker, rec, now)
			if !kept {
				p.deps.Log.Warn("persisted mark issued beyond this proxy's clock, discarded", "cpe_id", id, "version", rec.Version)
			}
			if inForce {
				c.requested, c.safe, c.mode, c.caps = rec.Weights.Clone(), false, rec.Mode, rec.CapsMbps
				event = payload.EventRestored
			}
		}
		c.event = event
		p.cpes[id] = c
	}
	p.clearUnserved()
	p.dirty = true
	p.flush(ctx)
	close(p.started)
	return nil
}

// clearUnserved empties the retained per-CPE state of CPEs whose state
// directory remains from an earlier configuration, then forgets them.
func (p *Proxy) clearUnserved() {
	dir := filepath.Join(p.cfg.StateDir, "cpe")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		id := e.Name()
		if _, served := p.cpes[id]; served || !e.IsDir() || !payload.ValidCPEID(id) {
			continue
		}
		p.deps.Log.Info("CPE no longer served: clearing its downlink state", "cpe_id", id)
		p.out.put(p.topics.CPEState(id), nil, true)
		if err := os.RemoveAll(filepath.Join(dir, id)); err != nil {
			p.deps.Log.Warn("state of an unserved CPE not removed", "cpe_id", id, "err", err)
		}
	}
}

func (p *Proxy) runLoop(ctx context.Context, beat func()) error {
	if err := p.Start(ctx); err != nil {
		return err
	}
	p.resetTimer()
	tick := time.NewTicker(beatEvery)
	defer tick.Stop()
	for {
		beat()
		select {
		case <-ctx.Done():
			return nil
		case m := <-p.inbox:
			p.handle(m)
			// Batch what is already waiting into one apply: at connect
			// every retained message arrives at once.
			for i := 0; i < drainMax; i++ {
				select {
				case m := <-p.inbox:
					p.handle(m)
					continue
				default:
				}
				break
			}
		case <-p.timer.C:
		case <-tick.C:
			// The timer runs on the monotonic clock, which stands still
			// while the machine is suspended; leases end by the wall clock.
			// A failed apply left the kernel unknown: try again each
			// second rather than wait for the next message.
			if p.applyErr != "" {
				p.dirty = true
			}
		case <-p.republish:
			for _, id := range p.order {
				if b := p.cpes[id].lastState; b != nil {
					p.out.put(p.topics.CPEState(id), b, true)
				}
			}
			if p.lastProxy != nil {
				p.out.put(p.topics.State(), p.lastProxy, true)
			}
		}
		p.expireLeases()
		p.flush(ctx)
		p.resetTimer()
	}
}

// handle routes one message to its CPE.
func (p *Proxy) handle(m message) {
	id, kind, ok := splitTopic(m.topic)
	c := p.cpes[id]
	if !ok || c == nil {
		p.deps.Log.Debug("message on a topic of no served CPE", "topic", m.topic)
		return
	}
	switch kind {
	case "weights":
		p.onWeights(c, m.data, m.at)
	case "state":
		p.onCPEState(c, m.data)
	}
}

// touch marks c changed: its paths are computed again and the served set
// applied after this batch.
func (p *Proxy) touch(c *cpe) {
	c.changed = true
	p.dirty = true
}

// splitTopic parses mcw/v1/cpe/{id}/{weights|state}.
func splitTopic(topic string) (id, kind string, ok bool) {
	rest, found := strings.CutPrefix(topic, "mcw/v1/cpe/")
	if !found {
		return "", "", false
	}
	id, kind, found = strings.Cut(rest, "/")
	if !found || (kind != "weights" && kind != "state") {
		return "", "", false
	}
	return id, kind, true
}

// onWeights mirrors the CPE agent's ProcessWeights for the dl set; the
// apply itself happens in flush, for the whole served set at once.
func (p *Proxy) onWeights(c *cpe, data []byte, at time.Time) {
	m := p.deps.Metrics
	if len(data) == 0 {
		// The retained weights were cleared: no weights, as when the lease
		// runs out (the CPE agent does the same).
		m.Updates.WithLabelValues("cleared").Inc()
		if c.tracker.Active() {
			p.endLease(c, p.deps.Now())
		}
		return
	}
	u, err := payload.ParseWeights(data, c.id)
	if err != nil {
		m.Updates.WithLabelValues("invalid").Inc()
		p.deps.Log.Warn("weights rejected", "cpe_id", c.id, "reason", err.Error())
		c.setEvent(payload.EventRejected, err)
		return
	}
	now := p.deps.Now()
	lu := lease.Update{
		Version:  u.Version,
		IssuedAt: time.UnixMilli(u.IssuedAtMs),
		Lease:    time.Duration(u.LeaseS * float64(time.Second)),
	}
	until, err := c.tracker.Check(lu, now)
	switch {
	case errors.Is(err, lease.ErrReplay):
		m.Updates.WithLabelValues("replay").Inc()
		return
	case err != nil:
		// Refused: nothing changes (see the CPE agent's ProcessWeights).
		m.Updates.WithLabelValues(lease.Result(err)).Inc()
		p.deps.Log.Warn("weights rejected", "cpe_id", c.id, "reason", err.Error())
		c.setEvent(payload.EventRejected, err)
		return
	}
	if c.pending == nil {
		c.pending = &pendingUpdate{prev: c.requested, prevCaps: c.caps, prevSafe: c.safe, prevMode: c.mode,
			prevMark: c.tracker.Mark(), prevUntil: c.tracker.Until()}
	}
	c.pending.version, c.pending.until, c.pending.at = u.Version, until, at
	c.pending.note = u.DL.Reason
	c.requested, c.safe, c.mode, c.caps = u.DL.Weights.Clone(), false, u.DL.Mode, u.DL.CapsMbps
	// The version counts as seen at once, so that a replay queued behind it
	// in this batch stays silent; a failed apply rolls it back.
	c.tracker.Grant(lu.Mark(), until)
	p.touch(c)
	c.setEvent(payload.EventApplied, nil)
}

// onCPEState takes the CPE agent's addresses and links.
func (p *Proxy) onCPEState(c *cpe, data []byte) {
	if len(data) == 0 {
		return // the retained state was cleared: keep what is known
	}
	s, err := payload.ParseState(data)
	switch {
	case err != nil:
	case s.CPEID != c.id:
		err = fmt.Errorf("%w: cpe_id %q on the topic of %q", payload.ErrInvalid, s.CPEID, c.id)
	case s.Role != "" && s.Role != payload.RoleCPE:
		err = fmt.Errorf("%w: role %q on a CPE agent's topic", payload.ErrInvalid, s.Role)
	default:
		err = p.registered(c.id, s.ParsedAddresses())
	}
	if err != nil {
		p.deps.Metrics.ProxyStates.WithLabelValues("invalid").Inc()
		p.deps.Log.Warn("CPE state ignored", "cpe_id", c.id, "reason", err.Error())
		return
	}
	p.deps.Metrics.ProxyStates.WithLabelValues("accepted").Inc()
	c.online = s.Online
	if !s.Online {
		// The agent's last will: its links are unknown, not down; the
		// downlink keeps its last known paths (the proxy's sender still
		// sees its subflows fail by itself).
		return
	}
	addrs := s.ParsedAddresses()
	downBefore, downNow := c.downWATs(), 0
	changed := len(addrs) != len(c.addrs)
	for w, a := range addrs {
		if c.addrs[w] != a {
			changed = true
		}
	}
	for w, l := range s.Links {
		if c.links[w] != l {
			changed = true
		}
	}
	if len(s.Links) != len(c.links) {
		changed = true
	}
	c.addrs, c.links = addrs, s.Links
	downNow = c.downWATs()
	if !changed {
		return
	}
	p.touch(c)
	ev := payload.EventLinkUp
	if downNow > downBefore {
		ev = payload.EventLinkDown
	}
	if c.event == "" {
		c.setEvent(ev, nil)
	}
	p.publishAddrs(c)
}

// registered checks a CPE's claimed addresses against the operator's
// registry: the CPE's claim alone never decides which traffic is its own
// when the operator has said.
func (p *Proxy) registered(id string, addrs map[string]netip.Addr) error {
	prefixes, listed := p.cfg.Prefixes[id]
	if !listed {
		return nil
	}
	for wat, a := range addrs {
		if !slices.ContainsFunc(prefixes, func(pfx netip.Prefix) bool { return pfx.Contains(a) }) {
			return fmt.Errorf("%w: addresses: %s=%s is outside the prefixes registered for %s (%v)", payload.ErrInvalid, wat, a, id, prefixes)
		}
	}
	return nil
}

func (c *cpe) downWATs() int {
	n := 0
	for _, l := range c.links {
		if l == "down" {
			n++
		}
	}
	return n
}

func (c *cpe) useSafe(safe payload.Weights) {
	c.requested, c.safe, c.mode, c.caps = safe.Clone(), true, "", nil
}

// setEvent records what to report for c after the next apply; a weights
// decision outranks a link change in the same batch.
func (c *cpe) setEvent(ev string, err error) {
	if c.event != "" && ev != payload.EventApplied && ev != payload.EventRejected &&
		(c.event == payload.EventApplied || c.event == payload.EventRejected) {
		return
	}
	c.event, c.eventErr = ev, err
}

// errNoAddress: the CPE agent has not (yet) reported any WAT address.
var errNoAddress = errors.New("no WAT address of this CPE known (its agent's state has none yet): downlink not steered")

// paths returns c's downlink paths: a WAT per known address, masked by the
// CPE's links, never all zero (then the safe weights of the usable WATs).
func (c *cpe) paths(safe payload.Weights) ([]backend.Path, error) {
	if len(c.addrs) == 0 {
		return nil, errNoAddress
	}
	mask := func(w payload.Weights, caps map[string]float64) []backend.Path {
		out := make([]backend.Path, 0, len(c.addrs))
		for _, wat := range payload.WATs() {
			a, ok := c.addrs[wat]
			if !ok {
				continue
			}
			weight := w[wat]
			if c.links[wat] == "down" {
				weight = 0
			}
			out = append(out, backend.Path{WAT: wat, Addr: a, Weight: weight, CapMbps: caps[wat]})
		}
		return out
	}
	positive := func(ps []backend.Path) bool {
		return slices.ContainsFunc(ps, func(p backend.Path) bool { return p.Weight > 0 })
	}
	eff := mask(c.requested, c.caps)
	if !positive(eff) {
		// The message's caps belong to its weights, not to the safe
		// weights standing in for them.
		eff = mask(safe, nil)
	}
	if !positive(eff) {
		return nil, errors.New("no usable WAT with a known address: downlink left unchanged")
	}
	return eff, nil
}

// expireLeases ends every lease that ran out by the wall clock.
func (p *Proxy) expireLeases() {
	now := p.deps.Now()
	for _, id := range p.order {
		c := p.cpes[id]
		if !c.tracker.Active() || now.Before(c.tracker.Until()) {
			continue
		}
		p.endLease(c, now)
	}
}

// endLease puts c on the safe weights: its lease ran out or its weights
// were withdrawn.
func (p *Proxy) endLease(c *cpe, now time.Time) {
	c.tracker.Expire()
	p.deps.Metrics.LeaseExpiries.Inc()
	c.useSafe(p.cfg.SafeWeights)
	c.pending = nil
	p.touch(c)
	p.save(c, now)
	p.deps.Log.Warn("lease ended, safe downlink weights in force", "cpe_id", c.id)
	c.setEvent(payload.EventLeaseExpired, nil)
}

// resetTimer arms the timer for the earliest lease end.
func (p *Proxy) resetTimer() {
	p.timer.Stop()
	now := p.deps.Now()
	var next time.Duration = -1
	for _, c := range p.cpes {
		if !c.tracker.Active() {
			continue
		}
		if d := c.tracker.Remaining(now); next < 0 || d < next {
			next = d
		}
	}
	if next >= 0 {
		p.timer.Reset(next)
	}
}

// flush applies the served set when anything changed, then reports.
func (p *Proxy) flush(ctx context.Context) {
	if p.dirty {
		p.apply(ctx)
	}
	for _, id := range p.order {
		if c := p.cpes[id]; c.event != "" {
			p.report(c)
		}
	}
	p.reportProxy()
}

// apply hands every expressible CPE to the backend and settles the
// pending updates by the result.
func (p *Proxy) apply(ctx context.Context) {
	p.dirty = false
	m := p.deps.Metrics
	set := make([]backend.Device, 0, len(p.order))
	want := map[string][]backend.Path{}
	conflicts := p.conflicts()
	for _, id := range p.order {
		c := p.cpes[id]
		if c.changed {
			c.want, c.wantErr = c.paths(p.cfg.SafeWeights)
			c.changed = false
		}
		ps, err := c.want, c.wantErr
		if cerr, clash := conflicts[id]; clash {
			// Neither claimant is steered: whichever is lying, a rule for
			// that address would act on the other's traffic.
			ps, err = nil, cerr
			if c.alarm == "" {
				c.setEvent(payload.EventRejected, cerr)
			}
			c.alarm = payload.AlarmAddressConflict
		} else if c.alarm != "" {
			c.alarm = ""
			c.setEvent(payload.EventApplied, nil)
		}
		c.unexpr = err
		if err != nil && c.alarm == "" {
			ps = c.applied // keep what is in force: never all zero
		}
		if ps == nil {
			continue
		}
		want[id] = ps
		set = append(set, backend.Device{CPEID: id, Paths: ps})
	}
	t0 := time.Now()
	notApplied, err := p.deps.Downlink.ApplyAll(ctx, set)
	m.ApplySeconds.Observe(time.Since(t0).Seconds())
	if err != nil {
		m.ApplyErrors.Inc()
		p.applyErr = err.Error()
		p.deps.Log.Error("downlink apply failed", "cpes", len(set), "err", err)
		for _, id := range p.order {
			c := p.cpes[id]
			c.applied = nil // unknown kernel state: the next change re-applies
			if pu := c.pending; pu != nil {
				// Not applied: as the CPE agent, which grants only after
				// the kernel write, forget the version so that the
				// retained message delivered again is judged afresh.
				c.requested, c.safe, c.mode, c.caps = pu.prev, pu.prevSafe, pu.prevMode, pu.prevCaps
				c.changed = true
				c.tracker.Restore(pu.prevMark, pu.prevUntil, p.deps.Now())
				c.pending = nil
				m.Updates.WithLabelValues("apply_error").Inc()
				c.eventErr = nil
				c.event = ""
				c.setEvent(payload.EventRejected, err)
			} else if c.event == "" {
				c.setEvent(payload.EventRejected, err)
			}
		}
		return
	}
	p.applyErr = ""
	m.Applies.WithLabelValues("update").Inc()
	for _, id := range p.order {
		c := p.cpes[id]
		ps, sent := want[id]
		wasIn := c.applied != nil && c.unexpr == nil
		if nerr, refused := notApplied[id]; refused {
			c.applied, c.unexpr = nil, fmt.Errorf("not applied by %s: %w", p.deps.Downlink.Name(), nerr)
		} else if sent {
			c.applied = ps
		} else if c.alarm != "" {
			c.applied = nil // left out of the set: its rules are gone
		}
		// A CPE can enter or leave the kernel without news of its own
		// (room under the rule bound, a retry after a failure): say so.
		if isIn := c.applied != nil && c.unexpr == nil; isIn != wasIn && c.event == "" {
			if isIn {
				c.setEvent(payload.EventApplied, nil)
			} else {
				c.setEvent(payload.EventRejected, c.unexpr)
			}
		}
		if pu := c.pending; pu != nil {
			c.pending = nil
			m.Updates.WithLabelValues("applied").Inc()
			if c.unexpr == nil {
				m.UpdateSeconds.Observe(time.Since(pu.at).Seconds())
			}
			p.save(c, p.deps.Now())
			p.deps.Log.Info("downlink weights accepted", "cpe_id", id, "version", pu.version,
				"weights", c.requested.String(), "mode", c.mode, "lease_until_ms", pu.until.UnixMilli(),
				"reason", pu.note, "applied", c.unexpr == nil)
		}
	}
	if rc, ok := p.deps.Downlink.(backend.RuleCounter); ok {
		p.rules.Used, p.rules.Limit = rc.Rules()
	}
	p.rules.OverflowCPEs = len(notApplied)
	if oc, ok := p.deps.Downlink.(overflowCounter); ok {
		p.rules.OverflowCPEs = oc.OverflowCPEs()
	}
	p.updateGauges()
}

// conflicts returns, per served CPE, why one of its claimed WAT addresses
// cannot be steered: another served CPE claims the same address.
func (p *Proxy) conflicts() map[string]error {
	owners := map[netip.Addr][]string{}
	for _, id := range p.order {
		for _, a := range p.cpes[id].addrs {
			owners[a] = append(owners[a], id)
		}
	}
	out := map[string]error{}
	for a, ids := range owners {
		if len(ids) < 2 {
			continue
		}
		for _, id := range ids {
			others := slices.DeleteFunc(slices.Clone(ids), func(o string) bool { return o == id })
			out[id] = errors.Join(out[id], fmt.Errorf("%s: address %s also claimed by %s: downlink not steered",
				payload.AlarmAddressConflict, a, strings.Join(others, ", ")))
		}
	}
	return out
}

func (p *Proxy) updateGauges() {
	var applied, safe, unexpr, conflict float64
	for _, c := range p.cpes {
		if c.alarm == payload.AlarmAddressConflict {
			conflict++
		}
		switch {
		case c.applied == nil || c.unexpr != nil:
			unexpr++
		case c.safe:
			safe++
		default:
			applied++
		}
	}
	g := p.deps.Metrics.ProxyCPEs
	g.WithLabelValues("served").Set(float64(len(p.cpes)))
	g.WithLabelValues("applied").Set(applied)
	g.WithLabelValues("safe").Set(safe)
	g.WithLabelValues("unexpressed").Set(unexpr)
	g.WithLabelValues("address_conflict").Set(conflict)
	p.deps.Metrics.ProxyRules.WithLabelValues("used").Set(float64(p.rules.Used))
	p.deps.Metrics.ProxyRules.WithLabelValues("limit").Set(float64(p.rules.Limit))
}

// save queues c's record for the persister (latest wins per CPE).
func (p *Proxy) save(c *cpe, now time.Time) {
	var requested payload.Weights
	if !c.safe {
		requested = c.requested
	}
	rec := state.Snapshot(c.tracker, requested, c.mode, c.caps, now)
	p.persist.put(c.id, c.store, rec)
}

// report builds c's state (role proxy, direction dl) and queues it.
func (p *Proxy) report(c *cpe) {
	event, err := c.event, c.eventErr
	c.event, c.eventErr = "", nil
	if err == nil && c.unexpr != nil {
		err = c.unexpr
	}
	if err != nil {
		c.lastError = err.Error()
		if len(c.lastError) > payload.MaxErrorLen {
			c.lastError = c.lastError[:payload.MaxErrorLen]
		}
	} else if event != payload.EventRejected {
		c.lastError = ""
	}
	caps := p.caps
	s := payload.State{
		CPEID: c.id, Online: true, Role: payload.RoleProxy, ProxyID: p.cfg.ProxyID, Direction: payload.DL,
		TimeMs: p.deps.Now().UnixMilli(), AppliedWeights: payload.Weights{}, Backend: p.deps.Downlink.Name(),
		Capabilities: &caps, Links: map[string]string{}, Event: event, Alarm: c.alarm, LastError: c.lastError,
	}
	if !c.safe && c.applied != nil {
		s.AppliedVersion = c.tracker.Version()
	}
	for _, ps := range c.applied {
		s.AppliedWeights[ps.WAT] = ps.Weight
	}
	if cr, ok := p.deps.Downlink.(backend.CapsReporter); ok && c.applied != nil && c.unexpr == nil {
		if caps := cr.AppliedCaps(c.id); len(caps) > 0 {
			s.AppliedCapsMbps = caps
		}
	}
	for w, l := range c.links {
		if payload.KnownWAT(w) {
			s.Links[w] = l
		}
	}
	b, merr := s.Marshal()
	if merr != nil {
		p.deps.Log.Error("state not reported", "cpe_id", c.id, "err", merr)
		return
	}
	c.lastState = b
	p.out.put(p.topics.CPEState(c.id), b, true)
}

// reportProxy queues the proxy's own state when it changed.
func (p *Proxy) reportProxy() {
	applied := 0
	for _, c := range p.cpes {
		if c.applied != nil && c.unexpr == nil && !c.safe {
			applied++
		}
	}
	ps := payload.ProxyState{
		ProxyID: p.cfg.ProxyID, Online: true, Backend: p.deps.Downlink.Name(), Capabilities: p.caps,
		CPEs: len(p.cpes), CPEsApplied: applied, Rules: p.rules, LastError: p.applyErr,
	}
	if len(ps.LastError) > payload.MaxErrorLen {
		ps.LastError = ps.LastError[:payload.MaxErrorLen]
	}
	// Compare without the time, so an unchanged proxy does not republish
	// on every message.
	cmpB, _ := ps.Marshal()
	ps.TimeMs = p.deps.Now().UnixMilli()
	b, err := ps.Marshal()
	if err != nil {
		p.deps.Log.Error("proxy state not reported", "err", err)
		return
	}
	if p.lastProxy != nil && string(cmpB) == string(p.lastProxyKey) {
		return
	}
	p.lastProxyKey = cmpB
	p.lastProxy = b
	p.out.put(p.topics.State(), b, true)
}

// publishAddrs hands c's addresses to the telemetry sampler.
func (p *Proxy) publishAddrs(c *cpe) {
	info := make(map[string]telemetry.WATInfo, len(c.addrs))
	for w, a := range c.addrs {
		info[w] = telemetry.WATInfo{Addr: a, Up: c.links[w] != "down"}
	}
	p.mu.Lock()
	p.addrInfo[c.id] = info
	p.mu.Unlock()
}

// LastState returns the latest per-CPE state payload of cpeID (tests).
func (p *Proxy) LastState(cpeID string) []byte {
	return p.out.last(p.topics.CPEState(cpeID))
}
