// Command mcw-agent-bench measures the agent's update path with the
// wrr-sysctl backend on a temporary sysctl tree: from the weights payload's
// bytes handed to the agent to the weights written and verified by
// read-back (target p99 <= 1 ms). The baseline, measured in the same run,
// is the bare write and read-back of the same sysctl text, the floor any
// agent pays.
//
// The tree lives on tmpfs (/dev/shm) when available, like /proc/sys lives
// in memory; the state directory (fsynced, off the update path) on disk.
//
//	mcw-agent-bench [-n 20000] [-json]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/mcw-xapp/kernel-agent/agent"
	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/wrrsysctl"
	"github.com/mcw-xapp/kernel-agent/linkwatch"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// timed wraps a backend and records when the last Apply returned.
type timed struct {
	backend.Local
	done time.Time
}

func (t *timed) Apply(ctx context.Context, p []backend.Path) error {
	err := t.Local.Apply(ctx, p)
	t.done = time.Now()
	return err
}

type summary struct {
	N     int     `json:"n"`
	P50us float64 `json:"p50_us"`
	P99us float64 `json:"p99_us"`
	MaxUs float64 `json:"max_us"`
}

func summarize(d []time.Duration) summary {
	slices.Sort(d)
	us := func(x time.Duration) float64 { return float64(x.Nanoseconds()) / 1e3 }
	return summary{N: len(d), P50us: us(d[len(d)/2]), P99us: us(d[len(d)*99/100]), MaxUs: us(d[len(d)-1])}
}

func main() {
	n := flag.Int("n", 20000, "updates to time")
	asJSON := flag.Bool("json", false, "print JSON")
	flag.Parse()
	if err := run(*n, *asJSON); err != nil {
		fmt.Fprintln(os.Stderr, "mcw-agent-bench:", err)
		os.Exit(1)
	}
}

func run(n int, asJSON bool) error {
	if n < 100 {
		return fmt.Errorf("-n %d: want >= 100", n)
	}
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm"
	}
	tree, err := os.MkdirTemp(base, "mcw-bench-tree-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tree)
	stateDir, err := os.MkdirTemp("", "mcw-bench-state-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stateDir)
	for _, f := range []string{"proc/sys/net/mptcp/mptcp_scheduler", "proc/sys/net/mptcp/mptcp_wrr_li_weights", "sys/module/mptcp_rr/parameters/cwnd_limited"} {
		p := filepath.Join(tree, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			return err
		}
	}
	wrr, err := wrrsysctl.New(wrrsysctl.Config{ProcSysRoot: filepath.Join(tree, "proc/sys"), SysRoot: filepath.Join(tree, "sys")})
	if err != nil {
		return err
	}
	be := &timed{Local: wrr}
	addrs := map[string]netip.Addr{"nr": netip.MustParseAddr("10.0.0.20"), "wifi": netip.MustParseAddr("10.0.1.20"), "lifi": netip.MustParseAddr("10.0.2.20")}
	ifaces := map[string]string{"nr": "nr0", "wifi": "wlan0", "lifi": "lifi0"}
	links := linkwatch.Static{}
	for w, ifc := range ifaces {
		links[ifc] = linkwatch.Status{Interface: ifc, Index: len(links) + 2, LinkUp: true, Addr: addrs[w]}
	}
	a, err := agent.New(agent.Config{
		CPEID: "cpe-0001", WATs: ifaces, SafeWeights: payload.Weights{"nr": 1, "wifi": 1, "lifi": 1}, StateDir: stateDir,
	}, agent.Deps{Backend: backend.Own(be), Links: links, Metrics: metrics.New(), Log: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	persisted := make(chan error, 1)
	go func() { persisted <- a.RunPersister(ctx, func() {}) }() // its fsyncs compete, as in the agent
	defer func() { <-persisted }()
	defer cancel()
	if err := a.Start(ctx); err != nil {
		return err
	}

	// Baseline: the bare sysctl write and read-back of a 3-tuple rule list.
	text, _ := wrrsysctl.Format([]wrrsysctl.Tuple{{Src: addrs["nr"], Weight: 30}, {Src: addrs["wifi"], Weight: 100}, {Src: addrs["lifi"], Weight: 1}})
	wpath := filepath.Join(tree, "proc/sys/net/mptcp/mptcp_wrr_li_weights")
	baseline := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := os.WriteFile(wpath, []byte(text+"\n"), 0o644); err != nil {
			return err
		}
		if _, err := os.ReadFile(wpath); err != nil {
			return err
		}
		baseline = append(baseline, time.Since(t0))
	}

	msgs := make([][]byte, n)
	for i := range msgs {
		msgs[i] = []byte(fmt.Sprintf(`{"schema":"mcw.weights.v2","cpe_id":"cpe-0001","version":%d,"issued_at_ms":%d,`+
			`"lease_s":30,"dl":{"mode":"load_balancing","weights":{"nr":100,"wifi":%d}},`+
			`"ul":{"mode":"load_balancing","reason":"bench","weights":{"nr":%d,"wifi":100,"lifi":1}}}`, i+1, time.Now().UnixMilli(), 1+i%255, 1+i%255))
	}
	applied := make([]time.Duration, 0, n)
	total := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if ev := a.Process(ctx, agent.Message{Topic: "mcw/v1/cpe/cpe-0001/weights", Data: msgs[i], At: t0}); ev != payload.EventApplied {
			return fmt.Errorf("update %d: event %q", i+1, ev)
		}
		total = append(total, time.Since(t0))
		applied = append(applied, be.done.Sub(t0))
	}
	res := map[string]any{
		"update_to_verified_write":       summarize(applied),
		"process_call":                   summarize(total),
		"baseline_sysctl_write_readback": summarize(baseline),
		"tree":                           tree, "target_p99_us": 1000,
	}
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	for _, k := range []string{"update_to_verified_write", "process_call", "baseline_sysctl_write_readback"} {
		s := res[k].(summary)
		fmt.Printf("%-32s n=%d p50=%.1f us p99=%.1f us max=%.1f us\n", k, s.N, s.P50us, s.P99us, s.MaxUs)
	}
	s := res["update_to_verified_write"].(summary)
	verdict := "meets"
	if s.P99us > 1000 {
		verdict = "MISSES"
	}
	fmt.Printf("target: update to verified write p99 <= 1000 us: %s (tree on %s)\n", verdict, tree)
	return nil
}
