package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcw-xapp/kernel-agent/backend/wrrsysctl"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// TestProxyWRRSysctl runs the proxy core over the real wrr-sysctl downlink
// writing a temporary sysctl tree: the CPEs' dl weights become one tuple
// list with each CPE WAT address as destination, and the proxy state
// carries the backend's rule counts.
func TestProxyWRRSysctl(t *testing.T) {
	dir := t.TempDir()
	procSys, sys := filepath.Join(dir, "proc/sys"), filepath.Join(dir, "sys")
	weightsFile := filepath.Join(procSys, "net/mptcp/mptcp_wrr_li_weights")
	for _, f := range []string{filepath.Join(procSys, "net/mptcp/mptcp_scheduler"), weightsFile,
		filepath.Join(sys, "module/mptcp_rr/parameters/cwnd_limited")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("default\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dl, err := wrrsysctl.NewDownlink(wrrsysctl.DownlinkConfig{Config: wrrsysctl.Config{ProcSysRoot: procSys, SysRoot: sys}, MaxTuples: 2})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: t0}
	p, err := New(Config{Role: payload.RoleProxy, ProxyID: "proxy-0001", CPEs: []string{"cpe-0001", "cpe-0002"}, SafeWeights: payload.Weights{"nr": 1, "wifi": 1},
		StateDir: filepath.Join(dir, "state"), MaxClockSkew: 5 * time.Second},
		Deps{Backend: dl, Metrics: metrics.New(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, p: p, clk: clk}
	f.step(cpeState("cpe-0001", `{"nr":"10.31.1.2","wifi":"10.31.2.2"}`, `{"nr":"up","wifi":"up"}`),
		cpeState("cpe-0002", `{"nr":"10.32.1.2","wifi":"10.32.2.2"}`, `{"nr":"up","wifi":"up"}`),
		weights("cpe-0001", 1, t0, 30, `{"nr":200,"wifi":1}`, `{"nr":1}`))
	b, err := os.ReadFile(weightsFile)
	if err != nil {
		t.Fatal(err)
	}
	// 10.31.1.2 as the network-order u32 read little-endian: 33627914; a
	// weight of 1 is the kernel's default and not written.
	if got := strings.TrimSpace(string(b)); got != "0 33627914 200 0 0" {
		t.Fatalf("tuple list = %q", got)
	}
	if ps := f.proxyState(); ps.Backend != payload.BackendWRRSysctl || ps.Rules.Used != 1 || ps.Rules.Limit != 2 || ps.CPEsApplied != 1 {
		t.Fatalf("proxy state = %+v", ps)
	}
	// cpe-0002's two tuples do not fit beside cpe-0001's under a bound of 2:
	// it is reported, cpe-0001 keeps its rules.
	f.step(weights("cpe-0002", 1, t0, 30, `{"nr":7,"wifi":9}`, `{"nr":1}`))
	if s := f.state("cpe-0002"); !strings.Contains(s.LastError, "tuple list full") || len(s.AppliedWeights) != 0 {
		t.Fatalf("cpe-0002 beyond the bound: %+v", s)
	}
	if ps := f.proxyState(); ps.Rules.OverflowCPEs != 1 || ps.Rules.Used != 1 {
		t.Fatalf("proxy state = %+v", ps)
	}
	if s := f.state("cpe-0001"); s.AppliedWeights["nr"] != 200 || s.LastError != "" {
		t.Fatalf("cpe-0001: %+v", s)
	}
}
