package agent_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"

	"github.com/mcw-xapp/kernel-agent/agent"
	"github.com/mcw-xapp/kernel-agent/backend/dryrun"
	"github.com/mcw-xapp/kernel-agent/internal/brokertest"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/mqttclient"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// broker runs the real Mosquitto on loopback with the shipped test
// configuration, a test PKI from broker/make-test-pki.sh and the ACL that
// broker/make-acl.sh generates for proxy-0001 serving cpe-0001, cpe-0002.
type broker struct {
	addr, pki string
}

func startBroker(t *testing.T) broker {
	t.Helper()
	for _, bin := range []string{"mosquitto", "openssl", "bash"} {
		if _, err := exec.LookPath(bin); err != nil {
			if testing.Short() {
				t.Skipf("%s not installed", bin)
			}
			t.Fatalf("%s not installed (run with -short to skip)", bin)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	if out, err := exec.Command("bash", filepath.Join(root, "broker", "make-test-pki.sh"), pki, "3", "1", "1").CombinedOutput(); err != nil {
		t.Fatalf("make-test-pki.sh: %v\n%s", err, out)
	}
	aclPath := brokertest.MakeACL(t, dir, pki, "proxy-0001:cpe-0001,cpe-0002")
	addr := brokertest.Start(t, brokertest.Options{Dir: dir, PKI: pki, ACL: aclPath})
	return broker{addr: addr, pki: pki}
}

// client is a plain MQTT client with one of the PKI's certificates (the
// xApp's, or a CPE agent's) that records what it receives.
type client struct {
	c    *paho.Client
	mu   sync.Mutex
	msgs map[string][][]byte
}

func (b broker) dial(t *testing.T, cert, clientID string, topics ...string) *client {
	t.Helper()
	ca, _ := os.ReadFile(filepath.Join(b.pki, "ca.crt"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	kp, err := tls.LoadX509KeyPair(filepath.Join(b.pki, cert+".crt"), filepath.Join(b.pki, cert+".key"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", b.addr, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("dial %s: %v", cert, err)
	}
	c := &client{msgs: map[string][][]byte{}}
	c.c = paho.NewClient(paho.ClientConfig{
		Conn: packets.NewThreadSafeConn(conn),
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.msgs[pr.Packet.Topic] = append(c.msgs[pr.Packet.Topic], slices.Clone(pr.Packet.Payload))
			return true, nil
		}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.c.Connect(ctx, &paho.Connect{ClientID: clientID, CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatalf("%s connect: %v", cert, err)
	}
	t.Cleanup(func() { c.c.Disconnect(&paho.Disconnect{}) })
	if len(topics) > 0 {
		subs := make([]paho.SubscribeOptions, len(topics))
		for i, tp := range topics {
			subs[i] = paho.SubscribeOptions{Topic: tp, QoS: 1}
		}
		if _, err := c.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: subs}); err != nil {
			t.Fatalf("subscribe: %v", err)
		}
	}
	return c
}

// publish sends a retained QoS 1 message and returns the PUBACK reason.
func (c *client) publish(t *testing.T, topic string, b []byte) byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: b})
	if resp != nil && resp.ReasonCode >= 0x80 {
		return resp.ReasonCode
	}
	if err != nil {
		t.Fatalf("publish %s: %v", topic, err)
	}
	return 0
}

// wait returns the first message on topic (from index from on) that ok accepts.
func (c *client) wait(t *testing.T, topic string, ok func([]byte) bool) []byte {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		c.mu.Lock()
		msgs := slices.Clone(c.msgs[topic])
		c.mu.Unlock()
		for _, m := range msgs {
			if ok(m) {
				return m
			}
		}
	}
	t.Fatalf("no matching message on %s", topic)
	return nil
}

func weightsV2(cpeID string, version int64, dl, ul payload.Weights) []byte {
	b, _ := json.Marshal(map[string]any{
		"schema": payload.WeightsSchema, "cpe_id": cpeID, "version": version,
		"issued_at_ms": time.Now().UnixMilli(), "lease_s": 30,
		"dl": map[string]any{"mode": "fixed_split", "weights": dl},
		"ul": map[string]any{"mode": "fixed_split", "weights": ul},
	})
	return b
}

// TestProxyOverMosquitto runs the proxy core with its real MQTT client
// against the real broker and the generated ACL: the CPE agent's state
// gives the addresses, the xApp's weights reach the downlink backend, the
// proxy's reports reach the xApp, its goodbye says offline, and the ACL
// keeps a CPE certificate from speaking for the proxy.
func TestProxyOverMosquitto(t *testing.T) {
	b := startBroker(t)
	xapp := b.dial(t, "xapp", "mcw-xapp-test", "mcw/v1/proxy/#", "mcw/v1/s/#")
	cpe := b.dial(t, "cpe/cpe-0001", "cpe-0001")
	// What a proxy of an earlier release left retained on its legacy topic.
	legacyTopic := "mcw/v1/proxy/proxy-0001/cpe/cpe-0001/state"
	old := b.dial(t, "proxy/proxy-0001", "proxy-0001-old")
	oldState, _ := payload.State{CPEID: "cpe-0001", Online: true, Role: payload.RoleProxy, ProxyID: "proxy-0001", Direction: payload.DL}.Marshal()
	if code := old.publish(t, legacyTopic, oldState); code != 0 {
		t.Fatalf("legacy proxy state refused: 0x%02x", code)
	}
	cpeState := payload.State{CPEID: "cpe-0001", Online: true, Role: payload.RoleCPE, Direction: payload.UL,
		Addresses: map[string]string{"nr": "10.31.1.2", "wifi": "10.31.2.2"}, Links: map[string]string{"nr": "up", "wifi": "up"},
		Event: payload.EventStarted}
	sb, _ := cpeState.Marshal()
	if code := cpe.publish(t, mqttclient.TopicsFor("cpe-0001", mqttclient.DefaultShards).State, sb); code != 0 {
		t.Fatalf("CPE state refused: 0x%02x", code)
	}
	// A CPE certificate cannot act as the proxy.
	for _, topic := range []string{legacyTopic, "mcw/v1/s/47/proxy/proxy-0001/cpe/cpe-0001/state"} {
		if code := cpe.publish(t, topic, sb); code != 0x87 {
			t.Fatalf("CPE publishing as the proxy on %s: reason 0x%02x, want 0x87", topic, code)
		}
	}

	dl := dryrun.NewDownlink()
	m := metrics.New()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	px, err := agent.New(agent.Config{Role: payload.RoleProxy, ProxyID: "proxy-0001", CPEs: []string{"cpe-0001", "cpe-0002"},
		SafeWeights: payload.Weights{"nr": 1, "wifi": 1}, StateDir: t.TempDir(), MaxClockSkew: 5 * time.Second},
		agent.Deps{Backend: dl, Metrics: m, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := mqttclient.LoadTLS(filepath.Join(b.pki, "ca.crt"), filepath.Join(b.pki, "proxy", "proxy-0001.crt"), filepath.Join(b.pki, "proxy", "proxy-0001.key"))
	if err != nil {
		t.Fatal(err)
	}
	if cn, err := mqttclient.CommonName(tlsCfg); err != nil || cn != "proxy-0001" {
		t.Fatalf("CommonName = %q, %v", cn, err)
	}
	mctx, mcancel := context.WithCancel(context.Background())
	defer mcancel()
	willTopic, will := px.Offline()
	mc, err := mqttclient.Connect(mctx, mqttclient.Config{BrokerURL: "mqtts://" + b.addr, TLS: tlsCfg, ClientID: "proxy-0001",
		WillTopic: willTopic, Will: will, Subscriptions: px.Subscriptions(), OnMessage: px.HandleMessage, OnConnect: px.Republish})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- px.Run(ctx, mc) }()

	// The retained CPE state gives the addresses: safe weights applied.
	stateTopic := "mcw/v1/s/47/proxy/proxy-0001/cpe/cpe-0001/state"
	xapp.wait(t, stateTopic, func(b []byte) bool {
		s, err := payload.ParseState(b)
		return err == nil && s.Role == payload.RoleProxy && s.AppliedWeights["nr"] == 1 && s.AppliedWeights["wifi"] == 1
	})
	// cpe-0002 has no agent state: reported, not applied.
	xapp.wait(t, "mcw/v1/s/2/proxy/proxy-0001/cpe/cpe-0002/state", func(b []byte) bool {
		s, err := payload.ParseState(b)
		return err == nil && strings.Contains(s.LastError, "no WAT address")
	})

	// The proxy cleared its legacy retained state: a new subscriber finds none.
	xapp.wait(t, legacyTopic, func(b []byte) bool { return len(b) == 0 })
	late := b.dial(t, "xapp", "mcw-xapp-late", legacyTopic)
	time.Sleep(300 * time.Millisecond)
	late.mu.Lock()
	if n := len(late.msgs[legacyTopic]); n != 0 {
		t.Errorf("%d retained messages left on %s", n, legacyTopic)
	}
	late.mu.Unlock()

	// The xApp's weights take effect: publish to applied, measured.
	var lat []time.Duration
	for v := int64(1); v <= 30; v++ {
		want := payload.Weights{"nr": int(v), "wifi": 100}
		t0 := time.Now()
		if code := xapp.publish(t, "mcw/v1/cpe/cpe-0001/weights", weightsV2("cpe-0001", v, want, payload.Weights{"nr": 1})); code != 0 {
			t.Fatalf("xApp publish refused: 0x%02x", code)
		}
		for !equalW(dl.Last()["cpe-0001"], want) {
			if time.Since(t0) > time.Second {
				t.Fatalf("version %d not applied within 1 s: %v", v, dl.Last())
			}
			time.Sleep(200 * time.Microsecond)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	t.Logf("xApp publish (PUBACK) to downlink applied: p50 %v, max %v over %d updates", lat[len(lat)/2], lat[len(lat)-1], len(lat))
	s := payload.State{}
	xapp.wait(t, stateTopic, func(b []byte) bool {
		var err error
		s, err = payload.ParseState(b)
		return err == nil && s.AppliedVersion == 30
	})
	if s.Direction != payload.DL || s.ProxyID != "proxy-0001" || s.Event != payload.EventApplied {
		t.Fatalf("per-CPE state = %+v", s)
	}
	xapp.wait(t, "mcw/v1/proxy/proxy-0001/state", func(b []byte) bool {
		ps, err := payload.ParseProxyState(b)
		return err == nil && ps.Online && ps.CPEs == 2 && ps.CPEsApplied == 1
	})

	// Goodbye: the proxy says offline itself (what its will would say).
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer scancel()
	if willTopic != "mcw/v1/proxy/proxy-0001/state" {
		t.Fatalf("will on %s", willTopic)
	}
	if err := mc.PublishRetained(sctx, willTopic, will); err != nil {
		t.Fatal(err)
	}
	mc.Disconnect(sctx)
	xapp.wait(t, "mcw/v1/proxy/proxy-0001/state", func(b []byte) bool {
		ps, err := payload.ParseProxyState(b)
		return err == nil && !ps.Online
	})
}

func equalW(a, b payload.Weights) bool { return a != nil && a.Equal(b) }
