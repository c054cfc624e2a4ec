//go:build linux

// Package integration runs the real agent binary against the real kernel:
// two network namespaces (CPE and proxy) joined by two veth paths ("nr"
// and "wifi") with tbf rate limits, an MPTCP connection across both, a real
// Mosquitto with the test PKI (broker/make-test-pki.sh) and the shipped ACL
// (broker/acl), and the agent in mptcp-upstream mode.
//
// Topology choice: the broker runs inside the CPE namespace on its
// loopback (the server certificate is for 127.0.0.1), the agent connects
// to it there, and the test's "xApp" client dials into that namespace from
// a thread switched into it. No address outside the namespaces is used.
package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/mcw-xapp/kernel-agent/internal/brokertest"
	"github.com/mcw-xapp/kernel-agent/internal/nstest"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
	"github.com/mcw-xapp/kernel-agent/mqttclient"
	"github.com/mcw-xapp/kernel-agent/payload"
)

const (
	cpeID      = "cpe-0001"
	brokerPort = 18883
	serverPort = 5201
	rate       = "40mbit" // per path, uplink from the CPE
)

var (
	nrCPE    = netip.MustParseAddr("10.31.1.1")
	nrProxy  = netip.MustParseAddr("10.31.1.2")
	wifiCPE  = netip.MustParseAddr("10.31.2.1")
	wifiPrxy = netip.MustParseAddr("10.31.2.2")
)

// requireTools skips unless the test can build namespaces and run the
// broker; these are the only reasons to skip.
func requireTools(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("netns integration test needs root (network namespaces, CAP_NET_ADMIN)")
	}
	for _, bin := range []string{"ip", "tc", "mosquitto", "openssl", "bash"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("netns integration test needs %s in PATH", bin)
		}
	}
	if _, err := os.Stat("/proc/sys/net/mptcp/enabled"); err != nil {
		t.Skip("kernel without MPTCP (no /proc/sys/net/mptcp)")
	}
}

func sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// topology creates the two namespaces and paths; cleanup removes them even
// when the test fails.
type topology struct {
	cpe, proxy     string
	cpeNS, proxyNS netns.NsHandle
}

func newTopology(t *testing.T) *topology {
	suffix := strconv.Itoa(os.Getpid())
	tp := &topology{cpe: "mcw-cpe-" + suffix, proxy: "mcw-proxy-" + suffix}
	for _, ns := range []string{tp.cpe, tp.proxy} {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Skipf("cannot create network namespace %s: %v: %s", ns, err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	cmds := [][]string{
		{"ip", "-n", tp.cpe, "link", "set", "lo", "up"},
		{"ip", "-n", tp.proxy, "link", "set", "lo", "up"},
		{"ip", "-n", tp.cpe, "link", "add", "nr0", "type", "veth", "peer", "name", "pnr0", "netns", tp.proxy},
		{"ip", "-n", tp.cpe, "link", "add", "wifi0", "type", "veth", "peer", "name", "pwifi0", "netns", tp.proxy},
		{"ip", "-n", tp.cpe, "addr", "add", nrCPE.String() + "/24", "dev", "nr0"},
		{"ip", "-n", tp.cpe, "addr", "add", wifiCPE.String() + "/24", "dev", "wifi0"},
		{"ip", "-n", tp.proxy, "addr", "add", nrProxy.String() + "/24", "dev", "pnr0"},
		{"ip", "-n", tp.proxy, "addr", "add", wifiPrxy.String() + "/24", "dev", "pwifi0"},
		{"ip", "-n", tp.cpe, "link", "set", "nr0", "up"},
		{"ip", "-n", tp.cpe, "link", "set", "wifi0", "up"},
		{"ip", "-n", tp.proxy, "link", "set", "pnr0", "up"},
		{"ip", "-n", tp.proxy, "link", "set", "pwifi0", "up"},
		// Source routing: subflows from the wifi address leave by wifi0
		// even towards the server's nr address.
		{"ip", "-n", tp.cpe, "rule", "add", "from", wifiCPE.String(), "table", "102"},
		{"ip", "-n", tp.cpe, "route", "add", "default", "via", wifiPrxy.String(), "dev", "wifi0", "table", "102"},
		{"ip", "-n", tp.cpe, "rule", "add", "from", nrCPE.String(), "table", "101"},
		{"ip", "-n", tp.cpe, "route", "add", "default", "via", nrProxy.String(), "dev", "nr0", "table", "101"},
		// The uplink bottlenecks: tbf on the CPE's egress of each path.
		{"ip", "netns", "exec", tp.cpe, "tc", "qdisc", "add", "dev", "nr0", "root", "tbf", "rate", rate, "burst", "32kb", "latency", "50ms"},
		{"ip", "netns", "exec", tp.cpe, "tc", "qdisc", "add", "dev", "wifi0", "root", "tbf", "rate", rate, "burst", "32kb", "latency", "50ms"},
	}
	for _, ns := range []string{tp.cpe, tp.proxy} {
		cmds = append(cmds, []string{"ip", "netns", "exec", ns, "sysctl", "-q", "-w",
			"net.mptcp.enabled=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"})
	}
	for _, c := range cmds {
		sh(t, c...)
	}
	for _, ifc := range []string{"nr0", "wifi0"} {
		sh(t, "ip", "netns", "exec", tp.cpe, "sysctl", "-q", "-w", "net.ipv4.conf."+ifc+".rp_filter=0")
	}
	nss := openNamespaces(t, tp.cpe, tp.proxy)
	tp.cpeNS, tp.proxyNS = nss[0], nss[1]
	// Path-manager limits in both namespaces (the server must accept joins).
	allowSubflows(t, tp.cpeNS, tp.proxyNS)
	return tp
}

// txBytes returns the bytes sent by the CPE on nr0 and wifi0.
func (tp *topology) txBytes(t *testing.T) (nr, wifi uint64) {
	h, err := netlink.NewHandleAt(tp.cpeNS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, p := range []struct {
		name string
		v    *uint64
	}{{"nr0", &nr}, {"wifi0", &wifi}} {
		l, err := h.LinkByName(p.name)
		if err != nil {
			t.Fatal(err)
		}
		*p.v = l.Attrs().Statistics.TxBytes
	}
	return nr, wifi
}

// share measures the uplink bytes per path over d.
func (tp *topology) share(t *testing.T, d time.Duration) (nrMbps, wifiMbps float64) {
	n0, w0 := tp.txBytes(t)
	time.Sleep(d)
	n1, w1 := tp.txBytes(t)
	s := d.Seconds()
	return float64(n1-n0) * 8 / s / 1e6, float64(w1-w0) * 8 / s / 1e6
}

func repoRoot(*testing.T) string { return brokertest.RepoRoot() }

// startBroker makes the test PKI with the shipped script and runs Mosquitto
// with the shipped test configuration and ACL inside the CPE namespace.
func startBroker(t *testing.T, tp *topology, dir string) (pki string) {
	root := repoRoot(t)
	script := filepath.Join(root, "broker", "make-test-pki.sh")
	confIn := filepath.Join(root, "broker", "mosquitto.test.conf.in")
	acl := filepath.Join(root, "broker", "acl")
	for _, f := range []string{script, confIn, acl} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("shipped broker file missing: %v", err)
		}
	}
	pki = filepath.Join(dir, "pki")
	sh(t, "bash", script, pki, "1")
	brokertest.Start(t, brokertest.Options{Dir: dir, PKI: pki, Listen: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), brokerPort),
		Prefix: []string{"ip", "netns", "exec", tp.cpe}, In: func(f func() error) error { return nstest.In(tp.cpeNS, f) }})
	return pki
}

// xapp is the test's stand-in for the xApp: it publishes weights and
// collects the agent's state and telemetry, with the xApp's certificate.
type xapp struct {
	c         *paho.Client
	mu        sync.Mutex
	states    []payload.State
	telemetry []payload.Telemetry
	version   int64
}

func newXApp(t *testing.T, tp *topology, pki string) *xapp {
	return newClient(t, tp, pki, "xapp", "mcw-xapp-test", true)
}

// newClient connects with pki/<cert>.crt and .key; subscribe adds the
// xApp's subscriptions to the CPE's state and telemetry.
func newClient(t *testing.T, tp *topology, pki, cert, clientID string, subscribe bool) *xapp {
	ca, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	kp, err := tls.LoadX509KeyPair(filepath.Join(pki, cert+".crt"), filepath.Join(pki, cert+".key"))
	if err != nil {
		t.Fatal(err)
	}
	var conn net.Conn
	err = nstest.In(tp.cpeNS, func() error {
		var err error
		conn, err = tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", brokerPort),
			&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12})
		return err
	})
	if err != nil {
		t.Fatalf("xApp dial: %v", err)
	}
	x := &xapp{}
	x.c = paho.NewClient(paho.ClientConfig{
		Conn: packets.NewThreadSafeConn(conn),
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			x.mu.Lock()
			defer x.mu.Unlock()
			switch {
			case strings.HasSuffix(pr.Packet.Topic, "/state"):
				if s, err := payload.ParseState(pr.Packet.Payload); err == nil {
					x.states = append(x.states, s)
				}
			case strings.HasSuffix(pr.Packet.Topic, "/telemetry"):
				if tm, err := payload.ParseTelemetry(pr.Packet.Payload); err == nil {
					x.telemetry = append(x.telemetry, tm)
				}
			}
			return true, nil
		}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := x.c.Connect(ctx, &paho.Connect{ClientID: clientID, CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatalf("%s connect: %v", cert, err)
	}
	t.Cleanup(func() { x.c.Disconnect(&paho.Disconnect{}) })
	if !subscribe {
		return x
	}
	if _, err := x.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
		{Topic: mqttclient.TopicsFor(cpeID, mqttclient.DefaultShards).State, QoS: 1},
		{Topic: mqttclient.TopicsFor(cpeID, mqttclient.DefaultShards).Telemetry, QoS: 0},
	}}); err != nil {
		t.Fatalf("xApp subscribe: %v", err)
	}
	return x
}

// publish sends the next version of weights for the CPE.
func (x *xapp) publish(t *testing.T, leaseS float64, w payload.Weights) int64 {
	x.version++
	if code := x.tryPublish(t, x.version, leaseS, w); code >= 0x80 {
		t.Fatalf("publish weights refused with reason 0x%02x", code)
	}
	return x.version
}

// tryPublish publishes weights and returns the PUBACK reason code.
func (x *xapp) tryPublish(t *testing.T, version int64, leaseS float64, w payload.Weights) byte {
	b, _ := json.Marshal(map[string]any{
		"schema": payload.WeightsSchema, "cpe_id": cpeID, "version": version,
		"issued_at_ms": time.Now().UnixMilli(), "lease_s": leaseS,
		// The CPE agent applies ul; dl (all on) is the proxy's and must not
		// steer the CPE, so a WAT switched off here is off in ul only.
		"dl": map[string]any{"mode": "fixed_split", "reason": "netns test", "weights": payload.Weights{"nr": 1, "wifi": 1}},
		"ul": map[string]any{"mode": "fixed_split", "reason": "netns test", "weights": w},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := x.c.Publish(ctx, &paho.Publish{Topic: "mcw/v1/cpe/" + cpeID + "/weights", QoS: 1, Retain: true, Payload: b})
	if resp != nil && resp.ReasonCode >= 0x80 {
		return resp.ReasonCode
	}
	if err != nil {
		t.Fatalf("publish weights: %v", err)
	}
	return 0
}

// waitState waits for a state matching ok, searching from index from.
func (x *xapp) waitState(t *testing.T, what string, from int, timeout time.Duration, ok func(payload.State) bool) (payload.State, int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		x.mu.Lock()
		for i := from; i < len(x.states); i++ {
			if ok(x.states[i]) {
				s := x.states[i]
				x.mu.Unlock()
				return s, i + 1
			}
		}
		x.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	t.Fatalf("no state %s; got %+v", what, x.states[from:])
	return payload.State{}, 0
}

func TestNetnsMPTCPUpstream(t *testing.T) {
	requireTools(t)
	if testing.Short() {
		t.Skip("-short: skipping the real-kernel integration test")
	}
	dir := t.TempDir()
	tp := newTopology(t)
	pki := startBroker(t, tp, dir)

	// The agent runs as nobody with CAP_NET_ADMIN only (as under the
	// systemd unit), in its own directory with copies of its certificate
	// and key (startAgent).
	x := newXApp(t, tp, pki)
	_, err := exec.LookPath("setpriv")
	unprivileged := err == nil
	if !unprivileged {
		t.Log("setpriv not found: the agent runs as root instead of nobody with CAP_NET_ADMIN only")
	}
	agent := startAgent(t, "agent", tp.cpe, buildAgent(t, dir), fmt.Sprintf(`cpe_id: %s
mqtt:
  broker_url: mqtts://127.0.0.1:%d
  ca_file: @DIR@/ca.crt
  cert_file: @DIR@/%s.crt
  key_file: @DIR@/%s.key
wats:
  nr: {interface: nr0}
  wifi: {interface: wifi0}
backend: mptcp-upstream
safe_weights: {nr: 1, wifi: 1}
state_dir: @DIR@/state
metrics_listen: 127.0.0.1:9472
telemetry: {interval_ms: 500}
log_level: info
`, cpeID, brokerPort, cpeID, cpeID), []string{
		filepath.Join(pki, "ca.crt"), filepath.Join(pki, "cpe", cpeID+".crt"), filepath.Join(pki, "cpe", cpeID+".key")})

	_, n := x.waitState(t, "started", 0, 10*time.Second, func(s payload.State) bool {
		return s.Online && s.Event == payload.EventStarted
	})
	if unprivileged {
		capEff := procStatus(t, agent.Process.Pid, "CapEff")
		uid := procStatus(t, agent.Process.Pid, "Uid")
		t.Logf("agent runs with Uid %q, CapEff %s (CAP_NET_ADMIN = 0000000000001000)", uid, capEff)
		if capEff != "0000000000001000" || !strings.HasPrefix(uid, "65534") {
			t.Fatalf("agent should run as nobody with CAP_NET_ADMIN only: Uid %q CapEff %s", uid, capEff)
		}
	}

	// The MPTCP connection: server in the proxy, client in the CPE, the
	// initial subflow on nr, a second one joined on wifi by the agent's
	// endpoints.
	var ln net.Listener
	if err := nstest.In(tp.proxyNS, func() error {
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		var err error
		ln, err = lc.Listen(context.Background(), "tcp4", netip.AddrPortFrom(nrProxy, serverPort).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go nstest.ServeDiscard(ln)
	var conn net.Conn
	if err := nstest.In(tp.cpeNS, func() error {
		var d net.Dialer
		d.SetMultipathTCP(true)
		var err error
		conn, err = d.Dial("tcp4", netip.AddrPortFrom(nrProxy, serverPort).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if mp, err := conn.(*net.TCPConn).MultipathTCP(); err != nil || !mp {
		t.Fatalf("connection is not MPTCP (%v): the kernel fell back to TCP", err)
	}
	stopWriter := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		buf := make([]byte, 64<<10)
		for {
			select {
			case <-stopWriter:
				return
			default:
			}
			conn.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := conn.Write(buf); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
		}
	}()
	defer func() { close(stopWriter); conn.Close(); <-writerDone }()
	time.Sleep(time.Second) // subflow join and slow start

	var phases []phase
	measure := func(name string) (float64, float64) {
		from := time.Now()
		nr, wifi := tp.share(t, 1500*time.Millisecond)
		phases = append(phases, phase{name: name, from: from, to: time.Now()})
		t.Logf("%-34s nr %6.1f Mbit/s  wifi %6.1f Mbit/s", name, nr, wifi)
		return nr, wifi
	}
	nr, wifi := measure("safe weights nr=1 wifi=1")
	if nr < 5 || wifi < 5 {
		t.Fatalf("both paths should carry data with both endpoints active (nr %.1f, wifi %.1f Mbit/s)", nr, wifi)
	}

	// Weight 0 for nr moves the bytes to wifi.
	v := x.publish(t, 30, payload.Weights{"nr": 0, "wifi": 1})
	_, n = x.waitState(t, "applied v1", n, 5*time.Second, func(s payload.State) bool {
		return s.Event == payload.EventApplied && s.AppliedVersion == v
	})
	time.Sleep(600 * time.Millisecond) // queued data drains; a loaded machine is slower
	nr, wifi = measure("published nr=0 wifi=1")
	if nr > 0.05*(nr+wifi) || wifi < 10 {
		t.Fatalf("after nr=0 the bytes should move to wifi (nr %.1f, wifi %.1f Mbit/s)", nr, wifi)
	}

	// A positive weight brings them back (and wifi=0 moves them off wifi).
	v = x.publish(t, 30, payload.Weights{"nr": 1, "wifi": 0})
	_, n = x.waitState(t, "applied v2", n, 5*time.Second, func(s payload.State) bool {
		return s.Event == payload.EventApplied && s.AppliedVersion == v
	})
	time.Sleep(600 * time.Millisecond)
	nr, wifi = measure("published nr=1 wifi=0")
	if wifi > 0.05*(nr+wifi) || nr < 10 {
		t.Fatalf("after nr=1 wifi=0 the bytes should be back on nr (nr %.1f, wifi %.1f Mbit/s)", nr, wifi)
	}

	// The shipped ACL: a client holding the CPE's own certificate cannot
	// write the CPE's weights (only the xApp can), so a compromised or
	// cloned CPE key cannot steer the agent.
	forger := newClient(t, tp, pki, "cpe/"+cpeID, cpeID+"-forger", false)
	if code := forger.tryPublish(t, 1000, 30, payload.Weights{"nr": 0, "wifi": 1}); code != 0x87 {
		t.Fatalf("ACL: weights published with the CPE's certificate got reason 0x%02x, want 0x87 (not authorised)", code)
	}

	// The lease runs out: safe weights (both paths) come back by themselves.
	v = x.publish(t, 1.5, payload.Weights{"nr": 0, "wifi": 1})
	t0 := time.Now()
	_, n = x.waitState(t, "applied v3", n, 5*time.Second, func(s payload.State) bool {
		return s.Event == payload.EventApplied && s.AppliedVersion == v
	})
	s, n := x.waitState(t, "lease-expired", n, 5*time.Second, func(s payload.State) bool {
		return s.Event == payload.EventLeaseExpired
	})
	t.Logf("lease of 1.5 s expired after %v", time.Since(t0).Round(time.Millisecond))
	if s.AppliedVersion != 0 || s.AppliedWeights["nr"] != 1 || s.AppliedWeights["wifi"] != 1 {
		t.Fatalf("after lease expiry: %+v", s)
	}
	time.Sleep(600 * time.Millisecond)
	nr, wifi = measure("lease expired (safe nr=1 wifi=1)")
	if nr < 5 || wifi < 5 {
		t.Fatalf("safe weights should use both paths again (nr %.1f, wifi %.1f Mbit/s)", nr, wifi)
	}

	// Telemetry from sock_diag reached the xApp with both WATs' subflows.
	x.mu.Lock()
	var telemetryOK bool
	for _, tm := range x.telemetry {
		if tm.WATs["nr"].Subflows >= 1 && tm.WATs["wifi"].Subflows >= 1 && tm.WATs["nr"].UL != nil && *tm.WATs["nr"].UL.BytesAcked > 0 && tm.WATs["wifi"].UL != nil && tm.WATs["wifi"].UL.DeliveredMbps > 0 {
			telemetryOK = true
		}
	}
	nTelemetry := len(x.telemetry)
	var lastTelemetry payload.Telemetry
	if nTelemetry > 0 {
		lastTelemetry = x.telemetry[nTelemetry-1]
	}
	x.mu.Unlock()
	if !telemetryOK {
		t.Fatalf("no telemetry sample with subflows and delivered bytes on both WATs (%d samples, last %+v)", nTelemetry, lastTelemetry)
	}
	t.Logf("telemetry (last of %d samples): nr %+v wifi %+v", nTelemetry, lastTelemetry.WATs["nr"], lastTelemetry.WATs["wifi"])

	// Saturation (the censoring flag of the capacity model): a WAT that
	// carries what its bottleneck allows reports near 1, a WAT the weights
	// switched off reports near 0, so its low throughput is not taken for
	// its capacity.
	x.mu.Lock()
	samples := slices.Clone(x.telemetry)
	x.mu.Unlock()
	for _, c := range []struct {
		phase     string
		saturated string // the WAT that carries the traffic: median >= 0.4
		censored  string // "" or the WAT switched off: median <= 0.25
	}{
		{"safe weights nr=1 wifi=1", "nr", ""},
		{"safe weights nr=1 wifi=1", "wifi", ""},
		{"published nr=0 wifi=1", "wifi", "nr"},
		{"published nr=1 wifi=0", "nr", "wifi"},
	} {
		i := slices.IndexFunc(phases, func(p phase) bool { return p.name == c.phase })
		if i < 0 {
			t.Fatalf("no phase %q", c.phase)
		}
		sat := phases[i].saturation(samples, c.saturated)
		t.Logf("%-34s %s saturated %v", c.phase, c.saturated, sat)
		// Thresholds sized for a loaded 2-core machine, where a sender
		// thread that is not scheduled leaves the path idle for part of an
		// interval (0.58 was seen on a path at its bottleneck): the two
		// cases stay apart by far more than the noise.
		if len(sat) == 0 || median(sat) < 0.4 {
			t.Errorf("%s: %s carried the traffic through its bottleneck but reports saturated %v, want near 1", c.phase, c.saturated, sat)
		}
		if c.censored == "" {
			continue
		}
		cens := phases[i].saturation(samples, c.censored)
		t.Logf("%-34s %s saturated %v (censored)", c.phase, c.censored, cens)
		if len(cens) == 0 || median(cens) > 0.25 {
			t.Errorf("%s: %s was switched off but reports saturated %v, want near 0", c.phase, c.censored, cens)
		}
	}

	// Link down: the agent removes nr's endpoint by itself, which closes
	// nr's subflow so that what it had not delivered goes out on wifi at
	// once (a backup flag would leave it to nr's retransmission timeout).
	nrID := endpoint(t, tp, nrCPE).ID
	latency := linkDownLatency(t, tp)
	s, n = x.waitState(t, "link-down", n, 5*time.Second, func(s payload.State) bool {
		return s.Event == payload.EventLinkDown
	})
	if s.Links["nr"] != "down" || s.AppliedWeights["nr"] != 0 || s.AppliedWeights["wifi"] != 1 {
		t.Fatalf("link-down state: %+v", s)
	}
	t.Logf("interface down -> nr endpoint removed: %v (target <= 50 ms)", latency)
	if latency > 50*time.Millisecond {
		t.Errorf("link-down reaction took %v, target 50 ms", latency)
	}
	h, _ := netlink.NewHandleAt(tp.cpeNS)
	defer h.Close()
	l, _ := h.LinkByName("nr0")
	if err := h.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	s, _ = x.waitState(t, "link-up", n, 5*time.Second, func(s payload.State) bool {
		return s.Event == payload.EventLinkUp
	})
	if s.Links["nr"] != "up" || s.AppliedWeights["nr"] != 1 {
		t.Fatalf("link-up state: %+v", s)
	}
	if e := endpoint(t, tp, nrCPE); e.ID != nrID || e.Flags&mptcppm.FlagBackup != 0 || e.Flags&mptcppm.FlagSubflow == 0 {
		t.Fatalf("nr endpoint after link up: %+v, want id %d with its subflow flag, not backup", e, nrID)
	}
	time.Sleep(time.Second) // the path manager joins nr again; slow start
	nr, wifi = measure("link back (nr endpoint restored)")
	if nr < 2 {
		t.Fatalf("after the link returned nr should carry data again on a new subflow (nr %.1f, wifi %.1f Mbit/s)", nr, wifi)
	}

	// Prometheus metrics and the health endpoint on the loopback of the
	// CPE namespace.
	get := func(path string) string {
		var text string
		if err := nstest.In(tp.cpeNS, func() error {
			c, err := net.Dial("tcp", "127.0.0.1:9472")
			if err != nil {
				return err
			}
			defer c.Close()
			fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n", path)
			b, err := io.ReadAll(c)
			text = string(b)
			return err
		}); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return text
	}
	if h := get("/healthz"); !strings.HasPrefix(h, "HTTP/1.0 200") || !strings.Contains(h, `"ok":true`) {
		t.Errorf("healthz: %s", h)
	}
	metricsText := get("/metrics")
	for _, want := range []string{`mcw_agent_applies_total{cause="link"}`, `mcw_agent_lease_expiries_total 1`, `mcw_agent_link_events_total{state="down",wat="nr"} 1`, `mcw_agent_updates_total{result="applied"} 3`, `mcw_agent_worker_up{worker="loop"} 1`, `mcw_agent_worker_up{worker="mqtt"} 1`} {
		if !strings.Contains(metricsText, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// nr's subflow came back by itself (its peer is on the link): the
	// agent's check 0.5 s after the return saw it and touched nothing.
	for _, l := range strings.Split(metricsText, "\n") {
		if strings.HasPrefix(l, "mcw_agent_rejoins_total{") {
			t.Errorf("nr rejoined by itself, yet its endpoint was put back again: %s", l)
		}
	}

	rss := vmRSS(t, agent.Process.Pid)
	t.Logf("agent resident memory (VmRSS): %.1f MB (target <= 20 MB)", float64(rss)/1024)
	if rss > 20*1024 {
		t.Errorf("agent VmRSS %d kB > 20 MB", rss)
	}
}

// linkDownLatency sets nr0 down through netlink (what `ip link set down`
// does) and polls the endpoints until the agent has removed nr's.
func linkDownLatency(t *testing.T, tp *topology) time.Duration {
	var latency time.Duration
	err := nstest.In(tp.cpeNS, func() error {
		pm, err := mptcppm.Dial()
		if err != nil {
			return err
		}
		defer pm.Close()
		l, err := netlink.LinkByName("nr0")
		if err != nil {
			return err
		}
		t0 := time.Now()
		if err := netlink.LinkSetDown(l); err != nil {
			return err
		}
		for time.Since(t0) < 2*time.Second {
			eps, err := pm.Endpoints()
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(eps, func(e mptcppm.Endpoint) bool { return e.Addr == nrCPE }) {
				latency = time.Since(t0)
				return nil
			}
			time.Sleep(200 * time.Microsecond)
		}
		return errors.New("nr endpoint not removed within 2 s of link down")
	})
	if err != nil {
		t.Fatal(err)
	}
	return latency
}

func endpoint(t *testing.T, tp *topology, a netip.Addr) mptcppm.Endpoint {
	var found mptcppm.Endpoint
	err := nstest.In(tp.cpeNS, func() error {
		pm, err := mptcppm.Dial()
		if err != nil {
			return err
		}
		defer pm.Close()
		eps, err := pm.Endpoints()
		for _, e := range eps {
			if e.Addr == a {
				found = e
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// procStatus returns a field of /proc/PID/status.
func procStatus(t *testing.T, pid int, field string) string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strings.TrimSpace(rest)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return ""
}

// vmRSS reads the resident set of pid in kB.
func vmRSS(t *testing.T, pid int) int {
	kb, err := strconv.Atoi(strings.TrimSuffix(procStatus(t, pid, "VmRSS"), " kB"))
	if err != nil {
		t.Fatal(err)
	}
	return kb
}

// phase is a stretch of the test with one set of weights.
type phase struct {
	name     string
	from, to time.Time
}

// saturation returns wat's saturated figures of the telemetry samples whose
// interval lies inside the phase.
func (p phase) saturation(samples []payload.Telemetry, wat string) []float64 {
	var out []float64
	for _, tm := range samples {
		start := time.UnixMilli(tm.TimeMs - tm.IntervalMs)
		if start.Before(p.from) || time.UnixMilli(tm.TimeMs).After(p.to) {
			continue
		}
		if w, ok := tm.WATs[wat]; ok && w.UL != nil && w.UL.Saturated != nil {
			out = append(out, *w.UL.Saturated)
		}
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
