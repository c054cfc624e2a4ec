package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mcw-xapp/kernel-agent/mqttclient"
	"github.com/mcw-xapp/kernel-agent/payload"
	"github.com/mcw-xapp/kernel-agent/state"
	"github.com/mcw-xapp/kernel-agent/telemetry"
)

// latest is the agent's one latest-wins queue: one value waiting per key (a
// topic for the publisher, a device for the persister), taken in the order
// the keys were first queued. A newer value replaces the one still
// waiting, so the queue never holds more than one value per key and never
// drops the newest: with a thousand CPEs a bounded channel would drop some
// CPE's news.
type latest[K comparable, V any] struct {
	mu      sync.Mutex
	pending map[K]V
	order   []K
	signal  chan struct{}
}

func newLatest[K comparable, V any]() *latest[K, V] {
	return &latest[K, V]{pending: map[K]V{}, signal: make(chan struct{}, 1)}
}

func (q *latest[K, V]) put(k K, v V) {
	q.mu.Lock()
	if _, queued := q.pending[k]; !queued {
		q.order = append(q.order, k)
	}
	q.pending[k] = v
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// take empties the queue: the keys in the order they were first queued and
// the latest value of each.
func (q *latest[K, V]) take() ([]K, map[K]V) {
	q.mu.Lock()
	defer q.mu.Unlock()
	order, pending := q.order, q.pending
	q.order, q.pending = nil, map[K]V{}
	return order, pending
}

// outMsg is one publish waiting for the publisher.
type outMsg struct {
	data     []byte
	retained bool
}

// outbox is the publisher's queue, and the latest retained payload per
// topic to publish again after a reconnect.
type outbox struct {
	q        *latest[string, outMsg]
	mu       sync.Mutex
	retained map[string][]byte
	topics   []string
	// clearing are the topics whose retained message is to be cleared (an
	// empty retained publish) and not yet acknowledged: one queued before
	// the first connection fails, and must go out once connected.
	clearing map[string]bool
}

func newOutbox() *outbox {
	return &outbox{q: newLatest[string, outMsg](), retained: map[string][]byte{}, clearing: map[string]bool{}}
}

func (o *outbox) put(topic string, b []byte, retained bool) {
	if retained {
		o.mu.Lock()
		if _, ok := o.retained[topic]; !ok {
			o.topics = append(o.topics, topic)
		}
		o.retained[topic] = b
		if len(b) == 0 {
			o.clearing[topic] = true
		} else {
			delete(o.clearing, topic)
		}
		o.mu.Unlock()
	}
	o.q.put(topic, outMsg{data: b, retained: retained})
}

// cleared records that the broker took (or refused for good) the clear of
// topic, which need not be sent again.
func (o *outbox) cleared(topic string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.retained[topic]) == 0 {
		delete(o.clearing, topic)
	}
}

// last returns the latest retained payload queued on topic.
func (o *outbox) last(topic string) []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.retained[topic]
}

// repeat queues every retained payload again, and the clears not yet
// acknowledged (one that was need not be: the broker forgot it for good).
func (o *outbox) repeat() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, t := range o.topics {
		if b := o.retained[t]; len(b) > 0 || o.clearing[t] {
			o.q.put(t, outMsg{data: b, retained: true})
		}
	}
}

// runPublisher sends what the loop queues, each publish bounded by a
// timeout, so a slow broker never delays a kernel write.
func (a *Agent) runPublisher(ctx context.Context, pub Publisher, beat func()) error {
	t := time.NewTicker(beatEvery)
	defer t.Stop()
	for {
		beat()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			continue
		case <-a.out.q.signal:
		}
		order, pending := a.out.q.take()
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
			if m.retained && len(m.data) == 0 && (err == nil || errors.Is(err, mqttclient.ErrRefused)) {
				// A refused clear is a legacy topic the ACL no longer
				// grants: nothing is retained there that this agent wrote.
				a.out.cleared(topic)
				err = nil
			}
			if err != nil && ctx.Err() == nil {
				kind := "state"
				if !m.retained {
					kind = "telemetry"
				}
				a.deps.Metrics.PublishErrors.WithLabelValues(kind).Inc()
				a.deps.Log.Debug("not published (republished on reconnect)", "topic", topic, "err", err)
			}
		}
	}
}

// persistItem is one device's record and where it goes.
type persistItem struct {
	store *state.Store
	rec   state.Record
}

// RunPersister writes the records the loop queues, off the loop (an fsync
// costs milliseconds), and what is still queued when ctx ends; it is the
// "persister" worker (benchmarks that call Start and Process alone run it
// themselves).
func (a *Agent) RunPersister(ctx context.Context, beat func()) error {
	save := func() {
		order, items := a.persist.take()
		for _, id := range order {
			if err := items[id].store.Save(items[id].rec); err != nil {
				a.deps.Log.Error("persist failed", "cpe_id", id, "err", err)
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
		case <-a.persist.signal:
			save()
		case <-ctx.Done():
			save()
			return nil
		}
	}
}

// runLinks runs the link watcher once Start has subscribed it (role cpe).
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

// runTelemetry samples the subflows every interval, off the loop: a slow
// sock_diag dump never delays a kernel write.
func (a *Agent) runTelemetry(ctx context.Context, beat func()) error {
	if err := a.waitStarted(ctx, beat); err != nil {
		return nil
	}
	aggs := map[string]*telemetry.Aggregator{}
	t := time.NewTicker(a.cfg.TelemetryInterval)
	defer t.Stop()
	for {
		beat()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			a.sampleTelemetry(aggs)
		}
	}
}

// sampleTelemetry takes one sock_diag dump and splits it per device by the
// subflows' address on the device's side: role cpe, the local address of
// each WAT (ul as the sender, dl as the receiver); role proxy, the remote
// address, a served CPE's WAT (the proxy's sending figures as dl).
func (a *Agent) sampleTelemetry(aggs map[string]*telemetry.Aggregator) {
	subs, err := a.deps.Subflows.Subflows()
	if err != nil {
		a.deps.Log.Warn("telemetry sample failed", "err", err)
		return
	}
	now := a.deps.Now()
	a.mu.Lock()
	info := make(map[string]map[string]telemetry.WATInfo, len(a.watInfo))
	for id, w := range a.watInfo {
		info[id] = w
	}
	a.mu.Unlock()
	for _, id := range a.order {
		wats := info[id]
		if len(wats) == 0 {
			continue // no address known: nothing to match
		}
		agg := aggs[id]
		if agg == nil {
			agg = &telemetry.Aggregator{MPTCPOnly: a.cfg.MPTCPOnly, Remote: !a.local}
			aggs[id] = agg
		}
		tm := payload.Telemetry{CPEID: id, TimeMs: now.UnixMilli(), IntervalMs: a.cfg.TelemetryInterval.Milliseconds(),
			WATs: agg.Sample(now, subs, wats)}
		if !a.local {
			tm.ProxyID = a.cfg.ProxyID
		}
		b, err := tm.Marshal()
		if err != nil {
			a.deps.Log.Error("telemetry not reported", "cpe_id", id, "err", err)
			continue
		}
		a.out.put(a.telemetryTopic(id), b, false)
	}
}
