package proxy

import (
	"context"
	"sync"
	"time"

	"github.com/mcw-xapp/kernel-agent/payload"
	"github.com/mcw-xapp/kernel-agent/state"
	"github.com/mcw-xapp/kernel-agent/telemetry"
)

// outMsg is one publish waiting for the publisher.
type outMsg struct {
	data     []byte
	retained bool
}

// outbox holds the latest payload per topic: with a thousand CPEs a
// bounded channel would drop some CPE's state, latest-wins per topic never
// drops the news and never grows beyond one payload per topic.
type outbox struct {
	mu      sync.Mutex
	pending map[string]outMsg
	order   []string
	latest  map[string][]byte
	signal  chan struct{}
}

func newOutbox() outbox {
	return outbox{pending: map[string]outMsg{}, latest: map[string][]byte{}, signal: make(chan struct{}, 1)}
}

func (o *outbox) put(topic string, b []byte, retained bool) {
	o.mu.Lock()
	if _, queued := o.pending[topic]; !queued {
		o.order = append(o.order, topic)
	}
	o.pending[topic] = outMsg{data: b, retained: retained}
	if retained {
		o.latest[topic] = b
	}
	o.mu.Unlock()
	select {
	case o.signal <- struct{}{}:
	default:
	}
}

// take returns the queued publishes in the order they were first queued.
func (o *outbox) take() ([]string, map[string]outMsg) {
	o.mu.Lock()
	defer o.mu.Unlock()
	order, pending := o.order, o.pending
	o.order, o.pending = nil, map[string]outMsg{}
	return order, pending
}

func (o *outbox) last(topic string) []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.latest[topic]
}

// runPublisher sends what the loop queues, each publish bounded by a
// timeout, so a slow broker never delays a kernel write.
func (p *Proxy) runPublisher(ctx context.Context, pub Publisher, beat func()) error {
	t := time.NewTicker(beatEvery)
	defer t.Stop()
	for {
		beat()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			continue
		case <-p.out.signal:
		}
		order, pending := p.out.take()
		for _, topic := range order {
			beat()
			m := pending[topic]
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var err error
			if m.retained {
				err = pub.PublishRetained(pctx, topic, m.data)
			} else {
				err = pub.PublishQoS0(pctx, topic, m.data)
			}
			cancel()
			if err != nil && ctx.Err() == nil {
				kind := "state"
				if !m.retained {
					kind = "telemetry"
				}
				p.deps.Metrics.PublishErrors.WithLabelValues(kind).Inc()
				p.deps.Log.Debug("not published (republished on reconnect)", "topic", topic, "err", err)
			}
		}
	}
}

// persistQueue holds the latest record per CPE for the persister.
type persistQueue struct {
	mu      sync.Mutex
	pending map[string]persistItem
	signal  chan struct{}
}

type persistItem struct {
	store *state.Store
	rec   state.Record
}

func newPersistQueue() persistQueue {
	return persistQueue{pending: map[string]persistItem{}, signal: make(chan struct{}, 1)}
}

func (q *persistQueue) put(id string, store *state.Store, rec state.Record) {
	q.mu.Lock()
	q.pending[id] = persistItem{store: store, rec: rec}
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *persistQueue) take() map[string]persistItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.pending
	q.pending = map[string]persistItem{}
	return out
}

// runPersister writes the queued records off the loop (an fsync costs
// milliseconds), and what is still queued when ctx ends.
func (p *Proxy) runPersister(ctx context.Context, beat func()) error {
	save := func() {
		for id, it := range p.persist.take() {
			if err := it.store.Save(it.rec); err != nil {
				p.deps.Log.Error("persist failed", "cpe_id", id, "err", err)
			}
			beat()
		}
	}
	t := time.NewTicker(beatEvery)
	defer t.Stop()
	for {
		beat()
		select {
		case <-t.C:
		case <-p.persist.signal:
			save()
		case <-ctx.Done():
			save()
			return nil
		}
	}
}

// runTelemetry samples the subflows every interval: one sock_diag dump,
// split per CPE by the subflows' remote address (a CPE WAT address).
func (p *Proxy) runTelemetry(ctx context.Context, beat func()) error {
	t0 := time.NewTicker(beatEvery)
	defer t0.Stop()
	for started := false; !started; {
		beat()
		select {
		case <-p.started:
			started = true
		case <-ctx.Done():
			return nil
		case <-t0.C:
		}
	}
	aggs := map[string]*telemetry.Aggregator{}
	t := time.NewTicker(p.cfg.TelemetryInterval)
	defer t.Stop()
	for {
		beat()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.sampleTelemetry(aggs)
		}
	}
}

func (p *Proxy) sampleTelemetry(aggs map[string]*telemetry.Aggregator) {
	subs, err := p.deps.Subflows.Subflows()
	if err != nil {
		p.deps.Log.Warn("telemetry sample failed", "err", err)
		return
	}
	now := p.deps.Now()
	p.mu.Lock()
	info := make(map[string]map[string]telemetry.WATInfo, len(p.addrInfo))
	for id, w := range p.addrInfo {
		info[id] = w
	}
	p.mu.Unlock()
	for _, id := range p.order {
		wats, ok := info[id]
		if !ok || len(wats) == 0 {
			continue // no address known: nothing to match
		}
		a := aggs[id]
		if a == nil {
			a = &telemetry.Aggregator{MPTCPOnly: p.cfg.MPTCPOnly, Remote: true}
			aggs[id] = a
		}
		tm := payload.Telemetry{CPEID: id, ProxyID: p.cfg.ProxyID, TimeMs: now.UnixMilli(),
			IntervalMs: p.cfg.TelemetryInterval.Milliseconds(), WATs: a.Sample(now, subs, wats)}
		b, err := tm.Marshal()
		if err != nil {
			p.deps.Log.Error("telemetry not reported", "cpe_id", id, "err", err)
			continue
		}
		p.out.put(p.topics.CPETelemetry(id), b, false)
	}
}
