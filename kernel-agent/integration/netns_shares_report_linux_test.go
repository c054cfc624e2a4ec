//go:build linux

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// SharesReport is what TestNetnsShares measured, written as JSON to the
// file named by the environment variable MCW_SHARES_REPORT when it is set
// (bench/bench_shares.py compares the twin's prediction with it). Rates
// are Mbit/s, shares fractions of the direction's bytes in the window
// (0..1), times seconds. The shape is versioned by Schema.
type SharesReport struct {
	Schema string `json:"schema"` // sharesReportSchema
	// Kernel is uname -r; LoadAvg /proc/loadavg's three averages when the
	// test ended (other work on the machine).
	Kernel     string           `json:"kernel"`
	LoadAvg    [3]float64       `json:"loadavg"`
	Topologies []ReportTopology `json:"topologies"`
}

const sharesReportSchema = "mcw.netns-shares-report.v1"

// ReportTopology is one topology of the test: its paths (each WAT's link
// rate, the same in both directions, and its buffer at the router) and
// the scenarios measured on it, in the order they ran.
type ReportTopology struct {
	Name      string           `json:"name"`
	Paths     []ReportPath     `json:"paths"`
	Scenarios []ReportScenario `json:"scenarios"`
}

// ReportPath is one WAT's emulated link.
type ReportPath struct {
	WAT      string  `json:"wat"`
	Mbps     float64 `json:"mbps"`
	BufferMs int     `json:"buffer_ms"`
}

// ReportScenario is one measured phase.
type ReportScenario struct {
	// Name: baseline (default scheduler, no agent), load_balancing,
	// wat_off, fixed_split, caps_from_message, proxy_fixed_split,
	// fixed_split_pacing (fixed_split with enforce pacing).
	Name string `json:"name"`
	// Direction: ul (the CPE agent's caps on the CPE's egress) or dl (the
	// proxy agent's caps on the proxy's egress).
	Direction string `json:"direction"`
	// Backend: "default" for the baseline (no agent steers), else the
	// agent's backend (mptcp-shares).
	Backend string `json:"backend"`
	// Enforce is how mptcp-shares enforced the caps (its config's
	// mptcp_shares.enforce): htb or pacing; absent for the baseline.
	Enforce string `json:"enforce,omitempty"`
	Mode    string `json:"mode,omitempty"`
	// Weights are the direction's weights sent; CapsMbpsSent the message's
	// caps_mbps (absent: the agent derived caps from its link rates).
	Weights      map[string]int     `json:"weights,omitempty"`
	CapsMbpsSent map[string]float64 `json:"caps_mbps_sent,omitempty"`
	// AppliedCapsMbps is the agent's state's applied_caps_mbps (a WAT
	// absent is uncapped); empty for the baseline.
	AppliedCapsMbps map[string]float64 `json:"applied_caps_mbps"`
	// WindowS is the window the rates and shares were measured over.
	WindowS       float64            `json:"window_s"`
	PathMbps      map[string]float64 `json:"path_mbps"`
	ByteShares    map[string]float64 `json:"byte_shares"`
	AggregateMbps float64            `json:"aggregate_mbps"`
	// SettleS is how long after the weights message the split (100 ms
	// windows) first met SettleCriterion; null when the scenario has no
	// criterion or it was not met within 3 s.
	SettleS         *float64 `json:"settle_s"`
	SettleCriterion string   `json:"settle_criterion,omitempty"`
}

// report collects what the test measured; it is written at the end when
// MCW_SHARES_REPORT names a file.
type report struct {
	mu  sync.Mutex
	rep SharesReport
}

func newReport(t *testing.T) *report {
	r := &report{rep: SharesReport{Schema: sharesReportSchema}}
	r.rep.Kernel = strings.TrimSpace(sh(t, "uname", "-r"))
	path := os.Getenv("MCW_SHARES_REPORT")
	if path == "" {
		return r
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile("/proc/loadavg"); err == nil {
			fmt.Sscan(string(b), &r.rep.LoadAvg[0], &r.rep.LoadAvg[1], &r.rep.LoadAvg[2])
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		b, err := json.MarshalIndent(r.rep, "", "  ")
		if err != nil {
			t.Errorf("shares report: %v", err)
			return
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Errorf("shares report: %v", err)
			return
		}
		t.Logf("shares report written to %s", path)
	})
	return r
}

// topology adds a topology to the report and returns its index.
func (r *report) topology(name string, tp *sharesTopology) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	rt := ReportTopology{Name: name, Scenarios: []ReportScenario{}}
	for _, p := range tp.paths {
		rt.Paths = append(rt.Paths, ReportPath{WAT: p.wat, Mbps: float64(p.mbit), BufferMs: p.bufferMs})
	}
	r.rep.Topologies = append(r.rep.Topologies, rt)
	return len(r.rep.Topologies) - 1
}

// scenario adds one measured phase to topology i.
func (r *report) scenario(i int, sc ReportScenario, m rates, window, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sc.WindowS = window.Seconds()
	sc.PathMbps, sc.ByteShares = map[string]float64{}, map[string]float64{}
	for wat, v := range m {
		sc.PathMbps[wat] = v
		sc.ByteShares[wat] = m.share(wat)
	}
	sc.AggregateMbps = m.total()
	if sc.AppliedCapsMbps == nil {
		sc.AppliedCapsMbps = map[string]float64{}
	}
	if took >= 0 && sc.SettleCriterion != "" {
		s := took.Seconds()
		sc.SettleS = &s
	}
	r.rep.Topologies[i].Scenarios = append(r.rep.Topologies[i].Scenarios, sc)
}
