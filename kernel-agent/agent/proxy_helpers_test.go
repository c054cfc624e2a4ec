package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/mcw-xapp/kernel-agent/backend/dryrun"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/mqttclient"
	"github.com/mcw-xapp/kernel-agent/payload"
	"github.com/mcw-xapp/kernel-agent/telemetry"
)

// clock is a settable clock for lease tests.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

var t0 = time.UnixMilli(1763800000000)

// fixture drives a Proxy's loop steps by hand: Start, then batches of
// messages each followed by what the loop does after a batch.
type fixture struct {
	t   testing.TB
	p   *Agent
	dl  *dryrun.Downlink
	clk *clock
	dir string
	m   *metrics.Metrics
}

func newFixture(t testing.TB, dir string, cpes ...string) *fixture {
	t.Helper()
	if len(cpes) == 0 {
		cpes = []string{"cpe-0001", "cpe-0002"}
	}
	clk := &clock{t: t0}
	dl := dryrun.NewDownlink()
	m := metrics.New()
	p, err := New(Config{Role: payload.RoleProxy, ProxyID: "proxy-0001", CPEs: cpes, SafeWeights: payload.Weights{"nr": 1, "wifi": 1, "lifi": 1},
		StateDir: dir, MaxClockSkew: 5 * time.Second},
		Deps{Backend: dl, Metrics: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, p: p, dl: dl, clk: clk, dir: dir, m: m}
}

// step handles msgs as one batch of the loop.
func (f *fixture) step(msgs ...Message) {
	f.p.Process(context.Background(), msgs...)
}

// persisted waits for the persister's work to be done synchronously.
func (f *fixture) persisted() {
	order, items := f.p.persist.take()
	for _, id := range order {
		if err := items[id].store.Save(items[id].rec); err != nil {
			f.t.Fatalf("save %s: %v", id, err)
		}
	}
}

func (f *fixture) state(cpeID string) payload.State {
	f.t.Helper()
	b := f.p.LastState(cpeID)
	if b == nil {
		f.t.Fatalf("no state for %s", cpeID)
	}
	s, err := payload.ParseState(b)
	if err != nil {
		f.t.Fatalf("own state does not parse: %v\n%s", err, b)
	}
	return s
}

func (f *fixture) proxyState() payload.ProxyState {
	f.t.Helper()
	s, err := payload.ParseProxyState(f.p.out.last(f.p.pt.State()))
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func weights(cpeID string, version int64, issued time.Time, lease float64, dl, ul string) Message {
	return Message{Topic: "mcw/v1/cpe/" + cpeID + "/weights", At: issued, Data: []byte(fmt.Sprintf(
		`{"schema":"mcw.weights.v2","cpe_id":%q,"version":%d,"issued_at_ms":%d,"lease_s":%g,`+
			`"dl":{"mode":"fixed_split","reason":"test","weights":%s},"ul":{"mode":"load_balancing","weights":%s}}`,
		cpeID, version, issued.UnixMilli(), lease, dl, ul))}
}

// onTopic moves m to the weights topic of cpeID.
func onTopic(cpeID string, m Message) Message {
	m.Topic = "mcw/v1/cpe/" + cpeID + "/weights"
	return m
}

// cpeState is the CPE agent's retained state with addresses and links.
func cpeState(cpeID, addrs, links string) Message {
	return Message{Topic: mqttclient.TopicsFor(cpeID, mqttclient.DefaultShards).State, Data: []byte(fmt.Sprintf(
		`{"schema":"mcw.state.v2","cpe_id":%q,"online":true,"role":"cpe","direction":"ul","time_ms":1,`+
			`"applied_version":0,"applied_weights":{},"addresses":%s,"links":%s,"event":"started","last_error":""}`,
		cpeID, addrs, links))}
}

const (
	addrs1 = `{"nr":"10.31.1.2","wifi":"10.31.2.2","lifi":"10.31.3.2"}`
	up1    = `{"nr":"up","wifi":"up","lifi":"up"}`
	addrs2 = `{"nr":"10.32.1.2","wifi":"10.32.2.2"}`
	up2    = `{"nr":"up","wifi":"up"}`
)

func stateErrors(t *testing.T, f *fixture) float64 {
	t.Helper()
	var m dto.Metric
	if err := f.m.PublishErrors.WithLabelValues("state").Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// subflows is a fixed sock_diag dump (the real dump is tested in package
// telemetry; here only the split per CPE is at stake).
type subflows struct{ list []telemetry.Subflow }

func (s *subflows) Subflows() ([]telemetry.Subflow, error) { return s.list, nil }
