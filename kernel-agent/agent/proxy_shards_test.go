package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcw-xapp/kernel-agent/backend/dryrun"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/mqttclient"
	"github.com/mcw-xapp/kernel-agent/payload"
)

func TestNewChecksShards(t *testing.T) {
	for _, tt := range []struct {
		shards int
		ok     bool
	}{{0, true}, {1, true}, {4096, true}, {-1, false}, {4097, false}} {
		_, err := New(Config{Role: payload.RoleProxy, ProxyID: "proxy-0001", CPEs: []string{"cpe-0001"}, SafeWeights: payload.Weights{"nr": 1},
			StateDir: t.TempDir(), Shards: tt.shards},
			Deps{Backend: dryrun.NewDownlink(), Metrics: metrics.New(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if (err == nil) != tt.ok {
			t.Errorf("New with %d shards: %v", tt.shards, err)
		}
	}
}

// An agent of an earlier release reports on the legacy topic; once the CPE's
// agent reports on its sharded topic, what the legacy one still holds is
// older and ignored.
func TestProxyReadsLegacyCPEStateUntilSharded(t *testing.T) {
	f := newFixture(t, t.TempDir(), "cpe-0001")
	legacy := func(addrs string) Message {
		m := cpeState("cpe-0001", addrs, `{"nr":"up"}`)
		m.Topic = "mcw/v1/cpe/cpe-0001/state"
		return m
	}
	nr := func() string { return f.p.devs["cpe-0001"].slots["nr"].addr.String() }
	f.step(legacy(`{"nr":"10.31.1.2"}`))
	if nr() != "10.31.1.2" {
		t.Fatalf("legacy state not read: nr %s", nr())
	}
	f.step(cpeState("cpe-0001", `{"nr":"10.31.1.3"}`, `{"nr":"up"}`))
	f.step(Message{Topic: "mcw/v1/cpe/cpe-0001/state"}, legacy(`{"nr":"10.31.1.2"}`))
	if nr() != "10.31.1.3" {
		t.Fatalf("a legacy state overrode the sharded one: nr %s", nr())
	}
}

// Start clears the retained states an earlier release left on the legacy
// topics, and sends the clears again after a reconnect until one was
// acknowledged.
func TestLegacyStatesClearedOnce(t *testing.T) {
	f := newFixture(t, t.TempDir(), "cpe-0001")
	legacy := "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/state"
	order, pending := f.p.out.q.take()
	if m, ok := pending[legacy]; !ok || !m.retained || len(m.data) != 0 {
		t.Fatalf("no clear of %s queued at start: %v", legacy, order)
	}
	f.p.out.repeat()
	if _, pending = f.p.out.q.take(); len(pending[legacy].data) != 0 || !pending[legacy].retained {
		t.Fatalf("an unacknowledged clear was not repeated: %v", pending)
	}
	f.p.out.cleared(legacy)
	f.p.out.repeat()
	if _, pending = f.p.out.q.take(); len(pending) == 0 {
		t.Fatal("nothing repeated")
	} else if _, again := pending[legacy]; again {
		t.Fatal("an acknowledged clear was sent again")
	}
}

// refusingPub refuses, as a broker whose ACL lost the legacy lines does,
// every publish on a legacy topic, and fails the others until online.
type refusingPub struct {
	mu     sync.Mutex
	online bool
	tried  map[string]int
}

func (p *refusingPub) PublishRetained(_ context.Context, topic string, _ []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tried[topic]++
	switch {
	case !p.online:
		return mqttclient.ErrNotConnected
	case !strings.HasPrefix(topic, "mcw/v1/s/") && strings.Contains(topic, "/cpe/"):
		return fmt.Errorf("mqtt: publish %s: %w with reason 0x87", topic, mqttclient.ErrRefused)
	}
	return nil
}

func (p *refusingPub) PublishQoS0(context.Context, string, []byte) error { return nil }

func (p *refusingPub) count(topic string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tried[topic]
}

// A clear lost before the connection is up goes out after it; one the
// broker refuses is done (not sent again, not counted as an error).
func TestLegacyClearAfterConnectAndRefused(t *testing.T) {
	f := newFixture(t, t.TempDir(), "cpe-0001")
	legacy := "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/state"
	pub := &refusingPub{tried: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.p.runPublisher(ctx, pub, func() {}) }()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out: %s", what)
			}
		}
	}
	waitFor("the first clear tried, offline", func() bool { return pub.count(legacy) == 1 })
	pub.mu.Lock()
	pub.online = true
	pub.mu.Unlock()
	f.p.out.repeat() // what the loop does on Republish after a connect
	waitFor("the clear tried again, refused", func() bool { return pub.count(legacy) == 2 })
	waitFor("the clear done", func() bool {
		f.p.out.mu.Lock()
		defer f.p.out.mu.Unlock()
		return !f.p.out.clearing[legacy]
	})
	f.p.out.repeat()
	waitFor("the state sent again", func() bool { return pub.count(f.p.stateTopic("cpe-0001")) >= 3 })
	cancel()
	<-done
	if n := pub.count(legacy); n != 2 {
		t.Errorf("the refused clear was tried %d times, want 2", n)
	}
	if got, offline := stateErrors(t, f), 3.0; got != offline {
		t.Errorf("%v state publish errors, want %v (those offline: the per-CPE state, the proxy's, "+
			"the clear); a refused clear is none", got, offline)
	}
}
