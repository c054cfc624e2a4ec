//go:build linux

package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/vishvananda/netns"

	"github.com/mcw-xapp/kernel-agent/internal/brokertest"
	"github.com/mcw-xapp/kernel-agent/internal/nstest"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
	"github.com/mcw-xapp/kernel-agent/payload"
)

const (
	bidirProxyID = "proxy-0001"
	bidirPort    = 18884
	dlPort       = 5301 // the proxy sends: downlink
	ulPort       = 5302 // the CPE sends: uplink
)

var (
	bidirProxy  = netip.MustParseAddr("10.32.0.2")
	bidirBroker = netip.MustParseAddr("10.32.0.1") // the router's proxy-side address
)

// bidirPath is one WAT: the CPE's interface and address, the router's
// side, and the rate in both directions.
type bidirPath struct {
	wat, ifc string
	cpe, rtr netip.Addr
	mbit     int
}

// Rates differ per WAT as in the paper's setup, modest enough for 2 cores
// carrying both directions at once.
var bidirPaths = []bidirPath{
	{"nr", "nr0", netip.MustParseAddr("10.32.1.1"), netip.MustParseAddr("10.32.1.2"), 24},
	{"wifi", "wifi0", netip.MustParseAddr("10.32.2.1"), netip.MustParseAddr("10.32.2.2"), 16},
	{"lifi", "lifi0", netip.MustParseAddr("10.32.3.1"), netip.MustParseAddr("10.32.3.2"), 8},
}

type bidirTopology struct {
	cpe, router, proxy       string
	cpeNS, routerNS, proxyNS netns.NsHandle
}

func newBidirTopology(t *testing.T) *bidirTopology {
	suffix := strconv.Itoa(os.Getpid())
	tp := &bidirTopology{cpe: "mcw-bcpe-" + suffix, router: "mcw-brtr-" + suffix, proxy: "mcw-bprx-" + suffix}
	for _, ns := range []string{tp.cpe, tp.router, tp.proxy} {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("cannot create network namespace %s: %v: %s", ns, err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	cmds := [][]string{
		{"ip", "-n", tp.proxy, "link", "add", "p0", "type", "veth", "peer", "name", "r0", "netns", tp.router},
		{"ip", "-n", tp.proxy, "addr", "add", bidirProxy.String() + "/24", "dev", "p0"},
		{"ip", "-n", tp.router, "addr", "add", bidirBroker.String() + "/24", "dev", "r0"},
		{"ip", "-n", tp.proxy, "link", "set", "p0", "up"},
		{"ip", "-n", tp.router, "link", "set", "r0", "up"},
		{"ip", "-n", tp.proxy, "route", "add", "default", "via", bidirBroker.String()},
	}
	for i, p := range bidirPaths {
		table := strconv.Itoa(101 + i)
		rate := strconv.Itoa(p.mbit) + "mbit"
		cmds = append(cmds,
			[]string{"ip", "-n", tp.cpe, "link", "add", p.ifc, "type", "veth", "peer", "name", "r" + p.wat, "netns", tp.router},
			[]string{"ip", "-n", tp.cpe, "addr", "add", p.cpe.String() + "/24", "dev", p.ifc},
			[]string{"ip", "-n", tp.router, "addr", "add", p.rtr.String() + "/24", "dev", "r" + p.wat},
			[]string{"ip", "-n", tp.cpe, "link", "set", p.ifc, "up"},
			[]string{"ip", "-n", tp.router, "link", "set", "r" + p.wat, "up"},
			// Source routing: a subflow from a WAT's address leaves by it.
			[]string{"ip", "-n", tp.cpe, "rule", "add", "from", p.cpe.String(), "table", table},
			[]string{"ip", "-n", tp.cpe, "route", "add", "default", "via", p.rtr.String(), "dev", p.ifc, "table", table},
			// Uplink bottleneck at the CPE's egress, downlink at the router's.
			[]string{"ip", "netns", "exec", tp.cpe, "tc", "qdisc", "add", "dev", p.ifc, "root", "tbf", "rate", rate, "burst", "32kb", "latency", "50ms"},
			[]string{"ip", "netns", "exec", tp.router, "tc", "qdisc", "add", "dev", "r" + p.wat, "root", "tbf", "rate", rate, "burst", "32kb", "latency", "50ms"},
		)
	}
	cmds = append(cmds, []string{"ip", "-n", tp.cpe, "route", "add", "default", "via", bidirPaths[0].rtr.String()},
		[]string{"ip", "netns", "exec", tp.router, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"})
	for _, ns := range []string{tp.cpe, tp.router, tp.proxy} {
		cmds = append(cmds, []string{"ip", "-n", ns, "link", "set", "lo", "up"},
			[]string{"ip", "netns", "exec", ns, "sysctl", "-q", "-w",
				"net.mptcp.enabled=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"})
	}
	for _, c := range cmds {
		sh(t, c...)
	}
	nss := openNamespaces(t, tp.cpe, tp.router, tp.proxy)
	tp.cpeNS, tp.routerNS, tp.proxyNS = nss[0], nss[1], nss[2]
	// The CPE's path manager may open a subflow per WAT; the proxy's
	// limits do not apply under the userspace path manager.
	allowSubflows(t, tp.cpeNS)
	return tp
}

// bidirIfcs maps each WAT to its CPE interface.
var bidirIfcs = func() map[string]string {
	m := map[string]string{}
	for _, p := range bidirPaths {
		m[p.wat] = p.ifc
	}
	return m
}()

// measure returns downlink and uplink Mbit/s per WAT over d.
func (tp *bidirTopology) measure(t *testing.T, d time.Duration) (dl, ul rates) {
	return measureLinks(t, tp.cpeNS, bidirIfcs, d)
}

// bidirBrokerPKI makes the test PKI (one CPE, one proxy), a server
// certificate for the broker's namespace address from the same CA, and the
// ACL with the proxy's grants from broker/make-acl.sh; it starts Mosquitto
// in the router namespace.
func startBidirBroker(t *testing.T, tp *bidirTopology, dir string) (pki string) {
	root := repoRoot(t)
	pki = filepath.Join(dir, "pki")
	sh(t, "bash", filepath.Join(root, "broker", "make-test-pki.sh"), pki, "1", "1", "1")
	ext := filepath.Join(dir, "server-ns.ext")
	if err := os.WriteFile(ext, []byte("[req]\ndistinguished_name=dn\n[dn]\n[leaf]\nbasicConstraints=critical,CA:FALSE\n"+
		"keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:"+bidirBroker.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sh(t, "openssl", "req", "-new", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
		"-keyout", filepath.Join(pki, "server-ns.key"), "-out", filepath.Join(pki, "server-ns.crt"), "-days", "2",
		"-subj", "/O=mcw-test/CN=mcw-broker-netns", "-CA", filepath.Join(pki, "ca.crt"), "-CAkey", filepath.Join(pki, "ca.key"),
		"-extensions", "leaf", "-config", ext)
	acl := sh(t, "bash", filepath.Join(root, "broker", "make-acl.sh"), bidirProxyID+":"+cpeID)
	if !strings.Contains(acl, "user "+bidirProxyID) {
		t.Fatalf("make-acl.sh printed no grants for %s:\n%s", bidirProxyID, acl)
	}
	aclPath := filepath.Join(dir, "acl")
	if err := os.WriteFile(aclPath, []byte(acl), 0o600); err != nil {
		t.Fatal(err)
	}
	brokertest.Start(t, brokertest.Options{Dir: dir, PKI: pki, ServerCert: "server-ns.crt", ServerKey: "server-ns.key",
		ACL: aclPath, Listen: netip.AddrPortFrom(bidirBroker, bidirPort),
		Prefix: []string{"ip", "netns", "exec", tp.router}, In: func(f func() error) error { return nstest.In(tp.routerNS, f) }})
	return pki
}

// buildAgent builds the agent binary into a directory nobody can traverse
// and read.
func buildAgent(t *testing.T, dir string) string {
	bin := filepath.Join(dir, "mcw-agent")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "./cmd/mcw-agent")
	build.Dir = filepath.Join(repoRoot(t), "kernel-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, out)
	}
	os.Chmod(bin, 0o755)
	return bin
}

// startAgent runs the agent with config text cfg in namespace ns, as
// nobody with CAP_NET_ADMIN only when setpriv is available. files are
// copied into its directory (owned by nobody) under their base names;
// "@DIR@" in cfg is that directory.
func startAgent(t *testing.T, name, ns, bin, cfg string, files []string) *exec.Cmd {
	return startAgentCaps(t, name, ns, bin, cfg, files, "+net_admin")
}

// startAgentCaps is startAgent with the capabilities the agent keeps
// under setpriv (setpriv's syntax: "+net_admin,+bpf").
func startAgentCaps(t *testing.T, name, ns, bin, cfg string, files []string, caps string) *exec.Cmd {
	const nobody = 65534
	dir, err := os.MkdirTemp("", "mcw-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chown(dst, nobody, nobody)
	}
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o700)
	os.Chown(state, nobody, nobody)
	cfgPath := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(cfgPath, []byte(strings.ReplaceAll(cfg, "@DIR@", dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"ip", "netns", "exec", ns}
	if _, err := exec.LookPath("setpriv"); err == nil {
		args = append(args, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
			"--inh-caps=-all,"+caps, "--ambient-caps=-all,"+caps, "--bounding-set=-all,"+caps, "--")
	}
	args = append(args, bin, "-config", cfgPath)
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		brokertest.Stop(cmd)
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s log:\n%s", name, b)
		}
	})
	return cmd
}

// watcher is the test's xApp on the broker: it publishes weights v2 and
// keeps every state message per topic.
type watcher struct {
	c       *paho.Client
	mu      sync.Mutex
	states  map[string][]payload.State
	version int64
}

func newWatcher(t *testing.T, tp *bidirTopology, pki string, topics ...string) *watcher {
	return dialBroker(t, tp, pki, "xapp", "mcw-xapp-bidir", topics...)
}

// dialBroker connects with the certificate pki/<cert>.crt and subscribes
// to topics.
func dialBroker(t *testing.T, tp *bidirTopology, pki, cert, clientID string, topics ...string) *watcher {
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
	if err := nstest.In(tp.routerNS, func() error {
		var err error
		conn, err = tls.Dial("tcp", netip.AddrPortFrom(bidirBroker, bidirPort).String(),
			&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12})
		return err
	}); err != nil {
		t.Fatalf("xApp dial: %v", err)
	}
	w := &watcher{states: map[string][]payload.State{}}
	w.c = paho.NewClient(paho.ClientConfig{
		Conn: packets.NewThreadSafeConn(conn),
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			if s, err := payload.ParseState(pr.Packet.Payload); err == nil {
				w.mu.Lock()
				w.states[pr.Packet.Topic] = append(w.states[pr.Packet.Topic], s)
				w.mu.Unlock()
			}
			return true, nil
		}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.c.Connect(ctx, &paho.Connect{ClientID: clientID, CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatalf("%s connect: %v", cert, err)
	}
	t.Cleanup(func() { w.c.Disconnect(&paho.Disconnect{}) })
	var subs []paho.SubscribeOptions
	for _, tp := range topics {
		subs = append(subs, paho.SubscribeOptions{Topic: tp, QoS: 1})
	}
	if len(subs) == 0 {
		return w
	}
	if _, err := w.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: subs}); err != nil {
		t.Fatalf("xApp subscribe: %v", err)
	}
	return w
}

// publish sends the next version with dl and ul sets and returns it.
func (w *watcher) publish(t *testing.T, dl, ul payload.Weights) int64 {
	w.version++
	b, _ := json.Marshal(map[string]any{
		"schema": payload.WeightsSchema, "cpe_id": cpeID, "version": w.version,
		"issued_at_ms": time.Now().UnixMilli(), "lease_s": 60,
		"dl": map[string]any{"mode": "fixed_split", "reason": "netns bidir test", "weights": dl},
		"ul": map[string]any{"mode": "fixed_split", "reason": "netns bidir test", "weights": ul},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := w.c.Publish(ctx, &paho.Publish{Topic: "mcw/v1/cpe/" + cpeID + "/weights", QoS: 1, Retain: true, Payload: b})
	if err != nil || (resp != nil && resp.ReasonCode >= 0x80) {
		t.Fatalf("publish weights: %v %+v", err, resp)
	}
	return w.version
}

// tryPublish publishes b retained at QoS 1 and returns the PUBACK reason.
func (w *watcher) tryPublish(t *testing.T, topic string, b []byte) byte {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := w.c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: b})
	if resp != nil {
		return resp.ReasonCode
	}
	if err != nil {
		t.Fatalf("publish %s: %v", topic, err)
	}
	return 0
}

// wait waits for a state on topic matching ok.
func (w *watcher) wait(t *testing.T, topic, what string, timeout time.Duration, ok func(payload.State) bool) payload.State {
	t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		w.mu.Lock()
		for _, s := range w.states[topic] {
			if ok(s) {
				w.mu.Unlock()
				return s
			}
		}
		w.mu.Unlock()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Fatalf("no %s state on %s within %v; got %+v", what, topic, timeout, w.states[topic])
	return payload.State{}
}

// bulk keeps one MPTCP connection from the CPE to the proxy's address
// busy in one direction until the test ends.
func bulk(t *testing.T, tp *bidirTopology, port int, downlink bool) {
	var ln net.Listener
	if err := nstest.In(tp.proxyNS, func() error {
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		var err error
		ln, err = lc.Listen(context.Background(), "tcp4", netip.AddrPortFrom(bidirProxy, uint16(port)).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	var conn net.Conn
	if err := nstest.In(tp.cpeNS, func() error {
		var d net.Dialer
		d.SetMultipathTCP(true)
		var err error
		conn, err = d.Dial("tcp4", netip.AddrPortFrom(bidirProxy, uint16(port)).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if mp, err := conn.(*net.TCPConn).MultipathTCP(); err != nil || !mp {
		t.Fatalf("connection is not MPTCP (%v): the kernel fell back to TCP", err)
	}
	sender, receiver := conn, peer
	if downlink {
		sender, receiver = peer, conn
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); sender.Close(); receiver.Close(); wg.Wait() })
	wg.Add(2)
	go func() {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			sender.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := sender.Write(buf); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			if _, err := receiver.Read(buf); err != nil {
				return
			}
		}
	}()
}

// subflowCount counts, in ns, the MPTCP subflows whose either end is a.
func subflowCount(t *testing.T, ns netns.NsHandle, a netip.Addr) int {
	n := 0
	if err := nstest.In(ns, func() error {
		d, err := mptcppm.DialDiag()
		if err != nil {
			return err
		}
		defer d.Close()
		sfs, err := d.Subflows()
		for _, s := range sfs {
			if s.Remote.Addr() == a || s.Local.Addr() == a {
				n++
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}
