package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/wrrsysctl"
	"github.com/mcw-xapp/kernel-agent/linkwatch"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// BenchmarkProcessWeightsWRR measures one weights payload from bytes in to
// the verified sysctl write and the queued state report, on a temporary
// /proc/sys and /sys tree (the persister's fsyncs run beside it and compete
// for the 2 cores). cmd/mcw-agent-bench reports percentiles.
func BenchmarkProcessWeightsWRR(b *testing.B) {
	a, err := NewWRRBenchAgent(b.TempDir(), memDir(b))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	persisted := make(chan error, 1)
	go func() { persisted <- a.RunPersister(ctx, func() {}) }()
	b.Cleanup(func() { cancel(); <-persisted })
	if err := a.Start(ctx); err != nil {
		b.Fatal(err)
	}
	msgs := make([][]byte, b.N)
	for i := range msgs {
		msgs[i] = benchPayload(int64(i+1), i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if ev := a.Process(ctx, Message{Topic: "mcw/v1/cpe/cpe-0001/weights", Data: msgs[i], At: time.Now()}); ev != payload.EventApplied {
			b.Fatalf("event %q: %s", ev, a.devs["cpe-0001"].lastError)
		}
	}
}

func benchPayload(version int64, i int) []byte {
	return []byte(fmt.Sprintf(`{"schema":"mcw.weights.v2","cpe_id":"cpe-0001","version":%d,"issued_at_ms":%d,`+
		`"lease_s":30,"dl":{"mode":"load_balancing","weights":{"nr":100,"wifi":%d}},"ul":{"mode":"load_balancing","reason":"bench","weights":{"nr":%d,"wifi":100,"lifi":1}}}`,
		version, time.Now().UnixMilli(), 1+i%255, 1+i%255))
}

// memDir returns a directory on tmpfs when the machine has /dev/shm, like
// the in-memory /proc/sys (a disk file system adds ext4's flush-on-close of
// truncated files, which the kernel's sysctls never pay).
func memDir(b *testing.B) string {
	dir, err := os.MkdirTemp("/dev/shm", "agent-bench-")
	if err != nil {
		return b.TempDir()
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// NewWRRBenchAgent builds an agent on the wrr-sysctl backend over a
// temporary tree under treeDir (state under dir), with three static links.
func NewWRRBenchAgent(dir, treeDir string) (*Agent, error) {
	root := filepath.Join(treeDir, "tree")
	for _, f := range []string{"proc/sys/net/mptcp/mptcp_scheduler", "proc/sys/net/mptcp/mptcp_wrr_li_weights", "sys/module/mptcp_rr/parameters/cwnd_limited"} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			return nil, err
		}
	}
	be, err := wrrsysctl.New(wrrsysctl.Config{ProcSysRoot: filepath.Join(root, "proc/sys"), SysRoot: filepath.Join(root, "sys")})
	if err != nil {
		return nil, err
	}
	links := linkwatch.Static{
		"nr0":   {Interface: "nr0", Index: 2, LinkUp: true, Addr: netip.MustParseAddr("10.0.0.20")},
		"wlan0": {Interface: "wlan0", Index: 3, LinkUp: true, Addr: netip.MustParseAddr("10.0.1.20")},
		"lifi0": {Interface: "lifi0", Index: 4, LinkUp: true, Addr: netip.MustParseAddr("10.0.2.20")},
	}
	return New(Config{
		CPEID:       "cpe-0001",
		WATs:        map[string]string{"nr": "nr0", "wifi": "wlan0", "lifi": "lifi0"},
		SafeWeights: payload.Weights{"nr": 1, "wifi": 1, "lifi": 1},
		StateDir:    filepath.Join(dir, "state"),
	}, Deps{Backend: backend.Own(be), Links: links, Metrics: metrics.New(), Log: slog.New(slog.NewJSONHandler(io.Discard, nil))})
}
