//go:build linux

package integration

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/mcw-xapp/kernel-agent/backend/mptcpshares/pacing"
	"github.com/mcw-xapp/kernel-agent/internal/nstest"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
	"github.com/mcw-xapp/kernel-agent/mqttclient"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// sharesPath is one WAT of a shares topology: its link rate in both
// directions and its buffer at the router in ms at that rate. A deep
// buffer makes the slow path: its RTT grows to hundreds of ms under load
// (bufferbloat, as on a congested radio link); this kernel has no netem to
// add fixed delay or loss.
type sharesPath struct {
	wat      string
	mbit     int
	bufferMs int
}

func (p sharesPath) ifc() string          { return p.wat + "0" }
func (p sharesPath) cpeAddr(i int) string { return fmt.Sprintf("10.34.%d.1", i+1) }
func (p sharesPath) rtrAddr(i int) string { return fmt.Sprintf("10.34.%d.2", i+1) }
func (p sharesPath) rq(i int) string      { return fmt.Sprintf("10.35.%d.1", i+1) }
func (p sharesPath) px(i int) string      { return fmt.Sprintf("10.35.%d.2", i+1) }

type sharesTopology struct {
	*bidirTopology
	paths []sharesPath
}

// shaper is the qdisc emulating a path's link at the router's egress.
func shaper(p sharesPath) []string {
	return []string{"tbf", "rate", strconv.Itoa(p.mbit) + "mbit", "burst", "32kb", "latency", strconv.Itoa(p.bufferMs) + "ms"}
}

func newSharesTopology(t *testing.T, tag string, paths []sharesPath) *sharesTopology {
	suffix := tag + "-" + strconv.Itoa(os.Getpid())
	tp := &sharesTopology{bidirTopology: &bidirTopology{cpe: "mcw-sc" + suffix, router: "mcw-sr" + suffix, proxy: "mcw-sp" + suffix}, paths: paths}
	for _, ns := range []string{tp.cpe, tp.router, tp.proxy} {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("cannot create network namespace %s: %v: %s", ns, err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	cmds := [][]string{
		{"ip", "-n", tp.proxy, "addr", "add", bidirProxy.String() + "/32", "dev", "lo"},
		{"ip", "-n", tp.router, "addr", "add", bidirBroker.String() + "/32", "dev", "lo"},
		{"ip", "netns", "exec", tp.router, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
	}
	for _, ns := range []string{tp.cpe, tp.router, tp.proxy} {
		cmds = append(cmds, []string{"ip", "-n", ns, "link", "set", "lo", "up"},
			[]string{"ip", "netns", "exec", ns, "sysctl", "-q", "-w",
				"net.mptcp.enabled=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"})
	}
	for i, p := range paths {
		table := strconv.Itoa(101 + i)
		cmds = append(cmds,
			[]string{"ip", "-n", tp.cpe, "link", "add", p.ifc(), "type", "veth", "peer", "name", "r" + p.wat, "netns", tp.router},
			[]string{"ip", "-n", tp.router, "link", "add", "q" + p.wat, "type", "veth", "peer", "name", "x" + p.wat, "netns", tp.proxy},
			[]string{"ip", "-n", tp.cpe, "addr", "add", p.cpeAddr(i) + "/24", "dev", p.ifc()},
			[]string{"ip", "-n", tp.router, "addr", "add", p.rtrAddr(i) + "/24", "dev", "r" + p.wat},
			[]string{"ip", "-n", tp.router, "addr", "add", p.rq(i) + "/24", "dev", "q" + p.wat},
			[]string{"ip", "-n", tp.proxy, "addr", "add", p.px(i) + "/24", "dev", "x" + p.wat},
			[]string{"ip", "-n", tp.cpe, "link", "set", p.ifc(), "up"},
			[]string{"ip", "-n", tp.router, "link", "set", "r" + p.wat, "up"},
			[]string{"ip", "-n", tp.router, "link", "set", "q" + p.wat, "up"},
			[]string{"ip", "-n", tp.proxy, "link", "set", "x" + p.wat, "up"},
			// A subflow from a WAT's address leaves the CPE by it and
			// reaches the proxy by the same path's link.
			[]string{"ip", "-n", tp.cpe, "rule", "add", "from", p.cpeAddr(i), "table", table},
			[]string{"ip", "-n", tp.cpe, "route", "add", "default", "via", p.rtrAddr(i), "dev", p.ifc(), "table", table},
			[]string{"ip", "-n", tp.router, "rule", "add", "from", p.cpeAddr(i) + "/24", "table", table},
			[]string{"ip", "-n", tp.router, "route", "add", bidirProxy.String(), "via", p.px(i), "dev", "q" + p.wat, "table", table},
			[]string{"ip", "-n", tp.proxy, "route", "add", p.cpeAddr(i)[:len(p.cpeAddr(i))-1] + "0/24", "via", p.rq(i), "dev", "x" + p.wat},
			// The link: uplink at the router's egress to the proxy,
			// downlink at its egress to the CPE.
			append([]string{"ip", "netns", "exec", tp.router, "tc", "qdisc", "add", "dev", "q" + p.wat, "root"}, shaper(p)...),
			append([]string{"ip", "netns", "exec", tp.router, "tc", "qdisc", "add", "dev", "r" + p.wat, "root"}, shaper(p)...),
		)
	}
	cmds = append(cmds, []string{"ip", "-n", tp.cpe, "route", "add", "default", "via", paths[0].rtrAddr(0)},
		// A proxy agent reaches the broker on the router's loopback.
		[]string{"ip", "-n", tp.proxy, "route", "add", bidirBroker.String(), "via", paths[0].rq(0)})
	// Socket buffers of a host tuned for multipath at both ends: MPTCP
	// reorders across paths whose delays differ (the slow path's deep
	// buffer), and the defaults (4 MB send, 6 MB receive) cap the
	// aggregate below the sum of the paths at random.
	for _, ns := range []string{tp.cpe, tp.proxy} {
		cmds = append(cmds, []string{"ip", "netns", "exec", ns, "sysctl", "-q", "-w",
			"net.ipv4.tcp_rmem=4096 131072 33554432", "net.ipv4.tcp_wmem=4096 16384 33554432"})
	}
	for _, c := range cmds {
		sh(t, c...)
	}
	nss := openNamespaces(t, tp.cpe, tp.router, tp.proxy)
	tp.cpeNS, tp.routerNS, tp.proxyNS = nss[0], nss[1], nss[2]
	// In-kernel path managers at both ends; the CPE has one subflow
	// endpoint per WAT address, as the agent would create them, so the
	// default scheduler alone (before any agent runs) uses every path.
	allowSubflows(t, tp.cpeNS, tp.proxyNS)
	h, err := netlink.NewHandleAt(tp.cpeNS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := nstest.In(tp.cpeNS, func() error {
		pm, err := mptcppm.Dial()
		if err != nil {
			return err
		}
		defer pm.Close()
		for i, p := range paths {
			l, err := h.LinkByName(p.ifc())
			if err != nil {
				return err
			}
			if err := pm.Add(mptcppm.Endpoint{Addr: netip.MustParseAddr(p.cpeAddr(i)), Flags: mptcppm.FlagSubflow, IfIndex: int32(l.Attrs().Index)}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("endpoints: %v", err)
	}
	return tp
}

// sumMbit is the sum of the path rates.
func (tp *sharesTopology) sumMbit() float64 {
	s := 0
	for _, p := range tp.paths {
		s += p.mbit
	}
	return float64(s)
}

// ifcs maps each WAT to its CPE interface.
func (tp *sharesTopology) ifcs() map[string]string {
	m := map[string]string{}
	for _, p := range tp.paths {
		m[p.wat] = p.ifc()
	}
	return m
}

// counters returns per WAT the bytes the CPE received and sent.
func (tp *sharesTopology) counters(t *testing.T) (rx, tx map[string]uint64) {
	return linkCounters(t, tp.cpeNS, tp.ifcs())
}

// measure returns downlink and uplink Mbit/s per WAT over d.
func (tp *sharesTopology) measure(t *testing.T, d time.Duration) (dl, ul rates) {
	return measureLinks(t, tp.cpeNS, tp.ifcs(), d)
}

func (tp *sharesTopology) fmt(r rates) string {
	var b strings.Builder
	for _, p := range tp.paths {
		fmt.Fprintf(&b, "%s %5.1f (%4.1f%%)  ", p.wat, r[p.wat], 100*r.share(p.wat))
	}
	fmt.Fprintf(&b, "total %5.1f", r.total())
	return b.String()
}

// settle waits until every path carries some of a fresh transfer (slow
// start and the joins), at most 5 s.
func (tp *sharesTopology) settle(t *testing.T, downlink bool) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		dl, ul := tp.measure(t, 300*time.Millisecond)
		r := ul
		if downlink {
			r = dl
		}
		all := true
		for _, p := range tp.paths {
			all = all && r[p.wat] > 0.1*float64(p.mbit)
		}
		if all {
			time.Sleep(time.Second)
			return
		}
	}
	t.Logf("not every path carries the fresh transfer after 5 s")
}

// sets is one weights message's two direction sets: weights and, for a
// rate-caps agent, caps_mbps (nil: none); ulClasses are the ul set's
// traffic classes (nil: none).
type sets struct {
	mode           string
	dl, ul         payload.Weights
	dlCaps, ulCaps map[string]float64
	ulClasses      []payload.Class
}

// publishSets sends the next version with both sets.
func publishSets(t *testing.T, w *watcher, s sets) int64 {
	w.version++
	dir := func(wts payload.Weights, caps map[string]float64) map[string]any {
		m := map[string]any{"mode": s.mode, "reason": "netns shares test", "weights": wts}
		if caps != nil {
			m["caps_mbps"] = caps
		}
		return m
	}
	ul := dir(s.ul, s.ulCaps)
	if s.ulClasses != nil {
		ul["classes"] = s.ulClasses
	}
	b, _ := json.Marshal(map[string]any{
		"schema": payload.WeightsSchema, "cpe_id": cpeID, "version": w.version,
		"issued_at_ms": time.Now().UnixMilli(), "lease_s": 120,
		"dl": dir(s.dl, s.dlCaps), "ul": ul,
	})
	if code := w.tryPublish(t, "mcw/v1/cpe/"+cpeID+"/weights", b); code >= 0x80 {
		t.Fatalf("publish weights: reason 0x%02x", code)
	}
	return w.version
}

// allOn is weight 1 for every WAT of ws.
func allOn(ws payload.Weights) payload.Weights {
	on := payload.Weights{}
	for k := range ws {
		on[k] = 1
	}
	return on
}

// cpeStateTopic and proxyStateTopic are where the CPE agent and the proxy
// report cpeID's state.
func cpeStateTopic() string { return mqttclient.TopicsFor(cpeID, mqttclient.DefaultShards).State }

func proxyStateTopic() string {
	return mqttclient.ProxyTopicsFor(bidirProxyID, mqttclient.DefaultShards).CPEState(cpeID)
}

// startSharesAgent starts the broker and the CPE agent with the
// mptcp-shares backend, the paths' rates as its link rates, and waits for
// its first state.
func startSharesAgent(t *testing.T, tp *sharesTopology, dir, bin string) *watcher {
	w, _ := startSharesAgentPKI(t, tp, dir, bin)
	return w
}

// startSharesAgentPKI is startSharesAgent that also returns the test PKI's
// directory (for a proxy agent); the watcher also follows the proxy's
// state of the CPE.
func startSharesAgentPKI(t *testing.T, tp *sharesTopology, dir, bin string) (*watcher, string) {
	return startSharesAgentPaced(t, tp, dir, bin, "")
}

// startSharesAgentPaced is startSharesAgentPKI; with a cgroup the agent
// enforces the caps by pacing the sockets of that cgroup (mptcp_shares
// enforce: pacing) and runs with CAP_BPF besides CAP_NET_ADMIN.
func startSharesAgentPaced(t *testing.T, tp *sharesTopology, dir, bin, cgroup string) (*watcher, string) {
	enforce, caps := "", "+net_admin"
	if cgroup != "" {
		enforce, caps = fmt.Sprintf("  enforce: pacing\n  pacing_cgroup: %s\n", cgroup), "+net_admin,+bpf"
	}
	return startSharesAgentWith(t, tp, dir, bin, enforce, caps)
}

// startSharesAgentWith is startSharesAgentPKI with enforce, the config's
// mptcp_shares lines besides link_mbps, and caps, the capabilities the
// agent keeps (setpriv's syntax).
func startSharesAgentWith(t *testing.T, tp *sharesTopology, dir, bin, enforce, caps string) (*watcher, string) {
	pki := startBidirBroker(t, tp.bidirTopology, dir)
	w := newWatcher(t, tp.bidirTopology, pki, cpeStateTopic(), proxyStateTopic())
	var wats, links, safe strings.Builder
	for _, p := range tp.paths {
		fmt.Fprintf(&wats, "  %s: {interface: %s}\n", p.wat, p.ifc())
		fmt.Fprintf(&links, "    %s: %g\n", p.wat, float64(p.mbit))
		fmt.Fprintf(&safe, "%s: 1, ", p.wat)
	}
	startAgentCaps(t, "shares-agent", tp.cpe, bin, fmt.Sprintf(`cpe_id: %s
mqtt: {broker_url: %q, ca_file: @DIR@/ca.crt, cert_file: @DIR@/%s.crt, key_file: @DIR@/%s.key}
wats:
%sbackend: mptcp-shares
mptcp_shares:
%s  link_mbps:
%ssafe_weights: {%s}
state_dir: @DIR@/state
metrics_listen: ""
telemetry: {interval_ms: 1000}
log_level: info
`, cpeID, fmt.Sprintf("mqtts://%s:%d", bidirBroker, bidirPort), cpeID, cpeID, wats.String(), enforce, links.String(), strings.TrimSuffix(safe.String(), ", ")),
		[]string{filepath.Join(pki, "ca.crt"), filepath.Join(pki, "cpe", cpeID+".crt"), filepath.Join(pki, "cpe", cpeID+".key")}, caps)
	s := w.wait(t, cpeStateTopic(), "shares agent applied its safe weights", 15*time.Second, func(s payload.State) bool {
		return s.Online && s.Backend == payload.BackendMPTCPShares && len(s.AppliedWeights) == len(tp.paths) && len(s.Addresses) == len(tp.paths)
	})
	t.Logf("agent: backend %s, capabilities %+v", s.Backend, s.Capabilities)
	if s.Capabilities == nil || s.Capabilities.Semantics != payload.SemanticsRateCaps {
		t.Errorf("mptcp-shares CPE agent reports capabilities %+v, want semantics rate-caps", s.Capabilities)
	}
	return w, pki
}

// startSharesProxy runs the proxy agent with the mptcp-shares downlink
// in the proxy namespace (before any transfer: it selects the userspace
// path manager) and waits until it serves the CPE at its addresses.
func startSharesProxy(t *testing.T, tp *sharesTopology, w *watcher, pki, bin string) {
	var links, safe, prefixes strings.Builder
	for i, p := range tp.paths {
		fmt.Fprintf(&links, "%s: %g, ", p.wat, float64(p.mbit))
		fmt.Fprintf(&safe, "%s: 1, ", p.wat)
		fmt.Fprintf(&prefixes, "%s/24, ", p.cpeAddr(i)[:len(p.cpeAddr(i))-1]+"0")
	}
	startAgent(t, "shares-proxy", tp.proxy, bin, fmt.Sprintf(`role: proxy
proxy_id: %s
cpes: [%s]
`+"cpe_prefixes: {"+cpeID+": ["+strings.TrimSuffix(prefixes.String(), ", ")+"]}\n"+`mqtt: {broker_url: %q, ca_file: @DIR@/ca.crt, cert_file: @DIR@/%s.crt, key_file: @DIR@/%s.key}
backend: mptcp-shares
mptcp_shares: {link_mbps: {%s}}
safe_weights: {%s}
state_dir: @DIR@/state
metrics_listen: ""
telemetry: {interval_ms: 1000}
log_level: info
`, bidirProxyID, cpeID, fmt.Sprintf("mqtts://%s:%d", bidirBroker, bidirPort), bidirProxyID, bidirProxyID,
		strings.TrimSuffix(links.String(), ", "), strings.TrimSuffix(safe.String(), ", ")),
		[]string{filepath.Join(pki, "ca.crt"), filepath.Join(pki, "proxy", bidirProxyID+".crt"), filepath.Join(pki, "proxy", bidirProxyID+".key")})
	s := w.wait(t, proxyStateTopic(), "proxy serving the CPE", 15*time.Second, func(s payload.State) bool {
		return s.Online && s.Role == payload.RoleProxy && len(s.AppliedWeights) == len(tp.paths)
	})
	if s.Backend != payload.BackendMPTCPShares || s.Capabilities == nil || s.Capabilities.Semantics != payload.SemanticsRateCaps {
		t.Errorf("proxy: backend %s capabilities %+v, want mptcp-shares with semantics rate-caps", s.Backend, s.Capabilities)
	}
}

// apply publishes ul weights with a mode (dl all on), waits for the CPE
// agent's applied state, and returns how long after the publish the
// uplink split first satisfied reached (see applySets).
func (tp *sharesTopology) apply(t *testing.T, w *watcher, mode string, ul payload.Weights, reached func(rates) bool) time.Duration {
	t.Helper()
	_, took := tp.applySets(t, w, sets{mode: mode, dl: allOn(ul), ul: ul}, false, reached)
	return took
}

// applySets publishes s, waits until the agent of the measured direction
// (the CPE's for ul, the proxy's for dl) applied it, and returns its state
// and how long after the publish the direction's split (100 ms windows)
// first satisfied reached, or -1 when not within 3 s.
func (tp *sharesTopology) applySets(t *testing.T, w *watcher, s sets, downlink bool, reached func(rates) bool) (payload.State, time.Duration) {
	t.Helper()
	counters := func() map[string]uint64 {
		rx, tx := tp.counters(t)
		if downlink {
			return rx
		}
		return tx
	}
	prev := counters()
	last := time.Now()
	t0 := last
	v := publishSets(t, w, s)
	var took time.Duration = -1
	for time.Since(t0) < 3*time.Second {
		time.Sleep(100 * time.Millisecond)
		cur := counters()
		now := time.Now()
		if r := diffRates(prev, cur, now.Sub(last)); took < 0 && reached(r) {
			took = now.Sub(t0)
		}
		prev, last = cur, now
	}
	topic := cpeStateTopic()
	if downlink {
		topic = proxyStateTopic()
	}
	st := w.wait(t, topic, fmt.Sprintf("applied v%d", v), 5*time.Second, func(s payload.State) bool {
		return s.AppliedVersion == v && s.Event == payload.EventApplied
	})
	return st, took
}

// tcClass reads an agent's HTB classes on an interface back with tc.
func tcClass(t *testing.T, ns, ifc string) string {
	return strings.Join(strings.Fields(sh(t, "ip", "netns", "exec", ns, "tc", "class", "show", "dev", ifc)), " ")
}

// agentCgroupPath returns where an agent started by startAgent sees the
// cgroup-v2 directory cg. ip netns exec mounts a fresh sysfs, under which
// no cgroup hierarchy is mounted; a second mount of the cgroup-v2
// hierarchy outside /sys (the same hierarchy: one cgroup, two paths)
// stays visible to it.
func agentCgroupPath(t *testing.T, cg string) string {
	mount, err := pacing.CgroupV2Mount()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(mount, cg)
	if err != nil || strings.HasPrefix(rel, "..") {
		t.Fatalf("cgroup %s is not under the cgroup-v2 mount %s", cg, mount)
	}
	dir, err := os.MkdirTemp("", "mcw-cgroup2-")
	if err != nil {
		t.Fatal(err)
	}
	sh(t, "mount", "-t", "cgroup2", "cgroup2", dir)
	// Registered after pacingCgroup's cleanup, so it runs first: the
	// agent (stopped before, registered later) no longer holds it.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
		os.Remove(dir)
	})
	return filepath.Join(dir, rel)
}
