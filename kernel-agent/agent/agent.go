// Package agent is the agent's core, one for both roles: a per-device
// applier keyed by CPE id takes the xApp's weights for its device, checks
// them (schema, CPE, version and lease, package lease), masks WATs whose
// link is down, hands the whole set of devices to one backend, persists
// each device's record and reports its state; a lease that runs out falls
// back to the safe weights, and per-WAT subflow telemetry is streamed.
//
// The role is data. Role cpe: one device, this host, with local addresses
// from its own interfaces (a LinkSource), the uplink set (ul), state and
// telemetry on mcw/v1/s/{shard}/cpe/{id}/... Role proxy: one device per
// served CPE, with remote addresses from each CPE agent's retained state
// (checked against the operator's registry and against each other), the
// downlink set (dl), state and telemetry on
// mcw/v1/s/{shard}/proxy/{proxy_id}/cpe/{id}/... and the proxy's own state
// on mcw/v1/proxy/{proxy_id}/state. The shard (mqttclient.ShardOf) lets
// each xApp replica subscribe to its shards' topics only.
//
// All decisions happen on one goroutine (the "loop" worker), so the devices
// need no locks; messages arrive through HandleMessage. The loop, the link
// watcher, the persister, the publisher and the telemetry sampler are
// workers of a supervisor (Workers), which notices when one dies or stalls.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/linkwatch"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/mqttclient"
	"github.com/mcw-xapp/kernel-agent/payload"
	"github.com/mcw-xapp/kernel-agent/supervisor"
	"github.com/mcw-xapp/kernel-agent/telemetry"
)

// Publisher sends the agent's reports; mqttclient.Client implements it.
type Publisher interface {
	PublishRetained(ctx context.Context, topic string, b []byte) error
	PublishQoS0(ctx context.Context, topic string, b []byte) error
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
	// Role is payload.RoleCPE (the default) or payload.RoleProxy.
	Role string
	// CPEID is the CPE's id (role cpe).
	CPEID string
	// WATs maps a WAT name to its interface (role cpe).
	WATs map[string]string
	// ProxyID is the proxy's id and CPEs the served CPEs' (role proxy).
	ProxyID string
	CPEs    []string
	// Prefixes is the operator's registry (role proxy): a CPE listed here
	// may only claim WAT addresses within its prefixes (nil: no registry).
	Prefixes map[string][]netip.Prefix
	// SafeWeights apply without a running lease (keys a device has no path
	// for are ignored).
	SafeWeights payload.Weights
	// StateDir holds the CPE's record (role cpe) or one directory per
	// served CPE, cpe/{id}/ (role proxy).
	StateDir string
	// TelemetryInterval between samples; 0 disables telemetry.
	TelemetryInterval time.Duration
	// MPTCPOnly restricts telemetry to MPTCP subflows.
	MPTCPOnly bool
	// MaxClockSkew is how far a weights update's issue time may lie ahead
	// of this device's clock (see lease.Config); zero allows none.
	MaxClockSkew time.Duration
	// Shards is the fleet's shard count (1..mqttclient.MaxShards), the
	// xApp's; 0 means mqttclient.DefaultShards.
	Shards int
	// LinkMbps is the configured link rate per WAT (mptcp-shares): a cap
	// at a WAT's link rate holds it at its link's own rate, so what it
	// delivers there is reported as a measurement (see ownLimits).
	LinkMbps map[string]float64
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
	// drainMax bounds how many queued messages one apply batches, so a
	// flood of one CPE's messages cannot hold the others' back for long.
	drainMax = 256
)

// Deps are the agent's collaborators. Backend, Metrics and Log are
// required, Links too in role cpe; Subflows may be nil (no telemetry); Now
// defaults to time.Now.
type Deps struct {
	Backend  backend.Backend
	Links    LinkSource
	Subflows SubflowSource
	Metrics  *metrics.Metrics
	Log      *slog.Logger
	Now      func() time.Time
}

// Message is one payload received on a topic.
type Message struct {
	Topic string
	Data  []byte
	At    time.Time
}

// Agent is the core. Create it with New; call HandleMessage and Republish
// from any goroutine; run its Workers once.
type Agent struct {
	cfg   Config
	deps  Deps
	local bool   // role cpe: one device, this host
	dir   string // the direction applied: payload.UL or payload.DL
	caps  payload.Capabilities
	pt    mqttclient.ProxyTopics
	// routes maps each subscribed topic to its device and kind.
	routes map[string]route
	wats   []string // role cpe: the configured WATs in canonical order
	order  []string // the devices' ids

	inbox     chan Message
	republish chan struct{}
	linkCh    chan linkwatch.Status
	started   chan struct{} // closed when Start is done

	// Owned by the loop goroutine (or the caller of Start and Process).
	devs  map[string]*device
	timer *time.Timer
	dirty bool   // the set must be applied again
	force bool   // ... even when it did not change (an update, a lease end, a retry)
	cause string // for the applies metric
	// lastSet, lastNotApplied: what the last successful ApplyAll was
	// handed and refused (lastOK false: nothing yet, or it failed).
	lastSet        []backend.Device
	lastNotApplied map[string]error
	lastOK         bool
	applyErr       string // the last ApplyAll's error, for the proxy state
	rules          payload.Rules
	lastProxyKey   []byte
	// rejoin fires when the backend's next check of a returned link's
	// path is due (backend.Rejoiner).
	rejoin *time.Timer

	out     *outbox
	persist *latest[string, persistItem]

	mu      sync.Mutex
	watInfo map[string]map[string]telemetry.WATInfo // per device, for the telemetry sampler

	stall stalls
}

// stalls are the workers' stall limits (constants, shortened by tests).
type stalls struct {
	loop, links, persister, publisher, telemetry time.Duration
}

// New checks cfg and deps and returns an Agent that has touched nothing yet.
func New(cfg Config, deps Deps) (*Agent, error) {
	if deps.Backend == nil || deps.Metrics == nil || deps.Log == nil {
		return nil, errors.New("agent: Backend, Metrics and Log are required")
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if err := cfg.SafeWeights.Validate(); err != nil {
		return nil, fmt.Errorf("agent: safe weights: %w", err)
	}
	if cfg.Shards == 0 {
		cfg.Shards = mqttclient.DefaultShards
	}
	if cfg.Shards < 1 || cfg.Shards > mqttclient.MaxShards {
		return nil, fmt.Errorf("agent: %d shards, want 1..%d", cfg.Shards, mqttclient.MaxShards)
	}
	if cfg.StateDir == "" {
		return nil, errors.New("agent: state directory required")
	}
	a := &Agent{cfg: cfg, deps: deps, republish: make(chan struct{}, 1), linkCh: make(chan linkwatch.Status, 16),
		started: make(chan struct{}), out: newOutbox(), persist: newLatest[string, persistItem](),
		watInfo: map[string]map[string]telemetry.WATInfo{}}
	switch cfg.Role {
	case "", payload.RoleCPE:
		a.local, a.dir = true, payload.UL
		if !payload.ValidCPEID(cfg.CPEID) {
			return nil, fmt.Errorf("agent: invalid cpe_id %q", cfg.CPEID)
		}
		if deps.Links == nil {
			return nil, errors.New("agent: role cpe needs Links")
		}
		for _, w := range payload.WATs() {
			if _, ok := cfg.WATs[w]; ok {
				a.wats = append(a.wats, w)
			}
		}
		if len(a.wats) == 0 || len(a.wats) != len(cfg.WATs) {
			return nil, errors.New("agent: WATs must be a non-empty set of known WATs")
		}
		a.order = []string{cfg.CPEID}
	case payload.RoleProxy:
		a.dir = payload.DL
		if !payload.ValidCPEID(cfg.ProxyID) {
			return nil, fmt.Errorf("agent: invalid proxy_id %q", cfg.ProxyID)
		}
		if len(cfg.CPEs) == 0 {
			return nil, errors.New("agent: no CPE to serve")
		}
		seen := map[string]bool{}
		for _, id := range cfg.CPEs {
			if !payload.ValidCPEID(id) || seen[id] {
				return nil, fmt.Errorf("agent: CPE id %q invalid or repeated", id)
			}
			seen[id] = true
		}
		a.order = slices.Clone(cfg.CPEs)
		a.pt = mqttclient.ProxyTopicsFor(cfg.ProxyID, cfg.Shards)
	default:
		return nil, fmt.Errorf("agent: unknown role %q", cfg.Role)
	}
	a.caps = payload.CapabilitiesOf(deps.Backend.Name(), deps.Backend.Capabilities())
	a.routes = a.routeTable()
	a.inbox = make(chan Message, 3*len(a.order)+64) // every retained message at connect fits (routeTable)
	a.timer = time.NewTimer(time.Hour)
	a.timer.Stop()
	a.rejoin = time.NewTimer(time.Hour)
	a.rejoin.Stop()
	a.stall = stalls{loop: loopStall, links: linksStall, persister: persisterStall, publisher: publisherStall,
		telemetry: cfg.TelemetryInterval + telemetryStall}
	return a, nil
}

// route is where a subscribed topic's messages go.
type route struct {
	id, kind string
	legacy   bool // a CPE agent's state on the unsharded topic of earlier releases
}

// routeTable lists the topics the agent reads: role cpe, its weights; role
// proxy, each served CPE's weights and its agent's state, on the sharded
// topic and, while agents of earlier releases may remain, the legacy one.
func (a *Agent) routeTable() map[string]route {
	r := make(map[string]route, 3*len(a.order))
	for _, id := range a.order {
		t := mqttclient.TopicsFor(id, a.cfg.Shards)
		r[t.Weights] = route{id: id, kind: "weights"}
		if !a.local {
			r[t.State] = route{id: id, kind: "state"}
			r[t.LegacyState] = route{id: id, kind: "state", legacy: true}
		}
	}
	return r
}

// Subscriptions returns the topics the agent reads (see routeTable), each
// device's together, in the order of the devices.
func (a *Agent) Subscriptions() []string {
	out := make([]string, 0, 3*len(a.order))
	for _, id := range a.order {
		t := mqttclient.TopicsFor(id, a.cfg.Shards)
		out = append(out, t.Weights)
		if !a.local {
			out = append(out, t.State, t.LegacyState)
		}
	}
	return out
}

// Offline returns the retained topic and payload that say the agent is
// gone: its last will, and what it publishes itself before a clean
// disconnect.
func (a *Agent) Offline() (topic string, data []byte) {
	if a.local {
		return mqttclient.TopicsFor(a.cfg.CPEID, a.cfg.Shards).State, payload.Offline(a.cfg.CPEID)
	}
	return a.pt.State(), payload.ProxyOffline(a.cfg.ProxyID)
}

// HandleMessage queues a message received at at. It never blocks: a full
// queue drops and counts it (only the newest version matters, and the
// retained message comes back on the next reconnect).
func (a *Agent) HandleMessage(topic string, data []byte, at time.Time) {
	select {
	case a.inbox <- Message{Topic: topic, Data: append([]byte(nil), data...), At: at}:
	default:
		a.deps.Metrics.Updates.WithLabelValues("dropped").Inc()
	}
}

// Republish asks the loop to publish every retained state again (after a
// reconnect). It never blocks.
func (a *Agent) Republish() {
	select {
	case a.republish <- struct{}{}:
	default:
	}
}

// Workers returns the agent's long-lived goroutines for a supervisor:
// "loop" (Start, then every decision), "links" (role cpe: the link
// watcher), "persister", "publisher" (when pub is not nil) and "telemetry"
// (when telemetry is configured). Each must run exactly once.
func (a *Agent) Workers(pub Publisher) []supervisor.Worker {
	ws := []supervisor.Worker{{Name: "loop", Run: a.runLoop, Stall: a.stall.loop}}
	if a.local {
		ws = append(ws, supervisor.Worker{Name: "links", Run: a.runLinks, Stall: a.stall.links})
	}
	ws = append(ws, supervisor.Worker{Name: "persister", Run: a.RunPersister, Stall: a.stall.persister})
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

// Start reads the links (role cpe), restores every device's persisted
// state, clears what a proxy published for CPEs it no longer serves and
// every device's retained state on its legacy topic, and
// applies the starting set (restored weights while their lease runs, safe
// ones otherwise). The loop worker calls it first; benchmarks call it
// alone. It must be called once.
func (a *Agent) Start(ctx context.Context) error {
	var initial map[string]linkwatch.Status
	if a.local {
		var err error
		if initial, err = a.deps.Links.Start(ctx); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
	}
	now := a.deps.Now()
	a.devs = make(map[string]*device, len(a.order))
	a.cause = "start"
	for _, id := range a.order {
		dir := filepath.Join(a.cfg.StateDir, "cpe", id)
		if a.local {
			dir = a.cfg.StateDir
		}
		d, err := newDevice(id, dir, a.cfg.MaxClockSkew, a.cfg.SafeWeights)
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		if a.local {
			d.configured = a.wats
			for _, w := range a.wats {
				d.setLocal(w, a.cfg.WATs[w], initial[a.cfg.WATs[w]])
			}
			a.publishInfo(d)
		}
		if restored := a.restore(d, now); restored {
			a.cause = "restore"
		}
		a.devs[id] = d
	}
	if !a.local {
		a.clearUnserved()
	}
	// The state moved to the sharded topic: what an earlier release left
	// retained on the legacy one would keep reaching the xApps (and a
	// proxy) that still read it, as a state that never changes.
	for _, id := range a.order {
		a.out.put(a.legacyStateTopic(id), nil, true)
	}
	a.dirty, a.force = true, true
	a.flush(ctx)
	close(a.started)
	return nil
}

// runLoop is the decision loop: messages, link changes, lease ends and
// republish requests meet here; each batch ends in one apply of the set.
func (a *Agent) runLoop(ctx context.Context, beat func()) error {
	if err := a.Start(ctx); err != nil {
		return err
	}
	a.resetTimer()
	tick := time.NewTicker(beatEvery)
	defer tick.Stop()
	for {
		beat()
		select {
		case <-ctx.Done():
			return nil
		case m := <-a.inbox:
			a.handle(m)
			// Batch what is already waiting into one apply: at connect
			// every retained message arrives at once.
			for i := 0; i < drainMax; i++ {
				select {
				case m := <-a.inbox:
					a.handle(m)
					continue
				default:
				}
				break
			}
		case s := <-a.linkCh:
			a.onLink(s)
		case <-a.timer.C:
		case <-a.rejoin.C:
			a.checkRejoins(ctx)
		case <-tick.C:
			// The timer runs on the monotonic clock, which stands still
			// while the machine is suspended; leases end by the wall clock
			// (expireLeases below). A failed apply left the kernel unknown:
			// try again each second rather than wait for the next message.
			if a.applyErr != "" {
				a.touchAll("retry")
			}
		case <-a.republish:
			a.out.repeat()
		}
		a.expireLeases()
		a.flush(ctx)
		a.resetTimer()
	}
}

// Process handles msgs as one batch of the loop and returns the event then
// reported for the device of the last message ("" when none, e.g. a
// silent replay). It is the loop's step for benchmarks and tests, called
// after Start; not safe for concurrent use with the loop worker.
func (a *Agent) Process(ctx context.Context, msgs ...Message) string {
	var last *device
	for _, m := range msgs {
		if d := a.handle(m); d != nil {
			last = d
		}
	}
	a.expireLeases()
	if a.dirty {
		a.apply(ctx)
	}
	ev := ""
	if last != nil {
		ev = last.event
	}
	a.flush(ctx)
	a.resetTimer()
	return ev
}

// handle routes one message to its device (returned; nil when none).
func (a *Agent) handle(m Message) *device {
	r, ok := a.routes[m.Topic]
	d := a.devs[r.id]
	switch {
	case !ok || d == nil:
		a.deps.Log.Debug("message on a topic of no device of this agent", "topic", m.Topic)
		return nil
	case r.kind == "weights":
		a.onWeights(d, m.Data, m.At)
	case r.kind == "state" && !a.local && r.legacy && d.sharded:
		// The CPE agent moved to the sharded topic; what is left on the
		// legacy one (it clears it, but a clear can be lost) is older.
		a.deps.Log.Debug("legacy CPE state ignored: the CPE reports on its sharded topic", "cpe_id", d.id)
		return nil
	case r.kind == "state" && !a.local:
		if !r.legacy && len(m.Data) > 0 {
			d.sharded = true
		}
		a.onCPEState(d, m.Data)
	default:
		return nil
	}
	return d
}

// legacyStateTopic is where earlier releases kept the device's retained
// state.
func (a *Agent) legacyStateTopic(id string) string {
	if a.local {
		return mqttclient.TopicsFor(id, a.cfg.Shards).LegacyState
	}
	return a.pt.LegacyCPEState(id)
}

// touch marks d changed: its paths are computed again and the set applied
// after this batch (force: even if the set comes out the same, as the
// backend then re-writes and verifies it).
func (a *Agent) touch(d *device, cause string, force bool) {
	d.changed = true
	a.dirty = true
	a.force = a.force || force
	if a.cause == "" || force {
		a.cause = cause
	}
}

func (a *Agent) touchAll(cause string) {
	for _, d := range a.devs {
		a.touch(d, cause, true)
	}
}

// expireLeases ends every lease that ran out by the wall clock (a device
// with an update being applied gets that update's lease instead).
func (a *Agent) expireLeases() {
	now := a.deps.Now()
	for _, id := range a.order {
		d := a.devs[id]
		if d.pending != nil || !d.tracker.Active() || now.Before(d.tracker.Until()) {
			continue
		}
		a.endLease(d, now)
	}
}

// resetTimer arms the timer for the earliest lease end.
func (a *Agent) resetTimer() {
	a.timer.Stop()
	now := a.deps.Now()
	var next time.Duration = -1
	for _, d := range a.devs {
		if !d.tracker.Active() {
			continue
		}
		if r := d.tracker.Remaining(now); next < 0 || r < next {
			next = r
		}
	}
	if next >= 0 {
		a.timer.Reset(next)
	}
}

// LastState returns the latest state payload of device cpeID (nil before
// Start).
func (a *Agent) LastState(cpeID string) []byte { return a.out.last(a.stateTopic(cpeID)) }

func (a *Agent) stateTopic(id string) string {
	if a.local {
		return mqttclient.TopicsFor(id, a.cfg.Shards).State
	}
	return a.pt.CPEState(id)
}

func (a *Agent) telemetryTopic(id string) string {
	if a.local {
		return mqttclient.TopicsFor(id, a.cfg.Shards).Telemetry
	}
	return a.pt.CPETelemetry(id)
}
