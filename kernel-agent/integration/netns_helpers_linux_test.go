//go:build linux

package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
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
