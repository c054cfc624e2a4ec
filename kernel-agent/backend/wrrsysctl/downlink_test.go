package wrrsysctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcw-xapp/kernel-agent/backend"
)

// proxyVectorFile holds the proxy list's steps, shared with the Python twin.
const proxyVectorFile = "../../../schemas/testdata/wrr-proxy-vectors.json"

type proxyVectors struct {
	MaxTuples int `json:"max_tuples"`
	Steps     []struct {
		Name string `json:"name"`
		CPEs []struct {
			CPEID string `json:"cpe_id"`
			Paths []struct {
				WAT    string `json:"wat"`
				Addr   string `json:"addr"`
				Weight int    `json:"weight"`
			} `json:"paths"`
		} `json:"cpes"`
		Text       string            `json:"text"`
		NotApplied map[string]string `json:"not_applied"`
	} `json:"steps"`
}

func loadProxyVectors(t *testing.T) proxyVectors {
	t.Helper()
	data, err := os.ReadFile(proxyVectorFile)
	if err != nil {
		t.Fatal(err)
	}
	var v proxyVectors
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", proxyVectorFile, err)
	}
	if len(v.Steps) < 5 || v.MaxTuples < 1 {
		t.Fatalf("%s: %d steps, max_tuples %d", proxyVectorFile, len(v.Steps), v.MaxTuples)
	}
	return v
}

func reason(err error) string {
	if errors.Is(err, ErrTupleBound) {
		return "bound"
	}
	return "address"
}

// TestProxyVectors runs the shared steps through ProxyTuples and through a
// Downlink writing a temporary sysctl tree, one step after the other (CPEs
// join, change, overflow the bound, leave), and checks the text written,
// the CPEs left out and why, and the rule counts.
func TestProxyVectors(t *testing.T) {
	v := loadProxyVectors(t)
	cfg := newTree(t)
	d, err := NewDownlink(DownlinkConfig{Config: cfg, MaxTuples: v.MaxTuples})
	if err != nil {
		t.Fatal(err)
	}
	for i, step := range v.Steps {
		t.Run(fmt.Sprintf("%d %s", i, step.Name), func(t *testing.T) {
			var cpes []backend.Device
			for _, c := range step.CPEs {
				cp := backend.Device{CPEID: c.CPEID}
				for _, p := range c.Paths {
					var a netip.Addr
					if p.Addr != "" {
						a = netip.MustParseAddr(p.Addr)
					}
					cp.Paths = append(cp.Paths, backend.Path{WAT: p.WAT, Addr: a, Weight: p.Weight})
				}
				cpes = append(cpes, cp)
			}
			tuples, _ := ProxyTuples(cpes, v.MaxTuples)
			if text, err := Format(tuples); err != nil || text != step.Text {
				t.Errorf("ProxyTuples+Format = %q, %v; want %q", text, err, step.Text)
			}
			notApplied, err := d.ApplyAll(context.Background(), cpes)
			if err != nil {
				t.Fatalf("ApplyAll: %v", err)
			}
			got := map[string]string{}
			bound := 0
			for id, err := range notApplied {
				got[id] = reason(err)
				if got[id] == "bound" {
					bound++
				}
			}
			if diff := cmp.Diff(step.NotApplied, got); diff != "" {
				t.Errorf("not applied (-want +got):\n%s (%v)", diff, notApplied)
			}
			written, err := os.ReadFile(filepath.Join(cfg.ProcSysRoot, weightsFile))
			if err != nil || strings.TrimSpace(string(written)) != step.Text {
				t.Errorf("file = %q, %v; want %q", written, err, step.Text)
			}
			used, limit := d.Rules()
			if overflow := d.OverflowCPEs(); used != len(strings.Fields(step.Text))/5 || limit != v.MaxTuples || overflow != bound {
				t.Errorf("Rules = %d, %d, %d", used, limit, overflow)
			}
		})
	}
}

func TestProxyTuplesRefusals(t *testing.T) {
	tests := []struct {
		name string
		cpe  backend.Device
	}{
		{"ipv6 address", backend.Device{CPEID: "c", Paths: []backend.Path{{WAT: "nr", Addr: netip.MustParseAddr("fd00::1"), Weight: 3}}}},
		{"weight above 255", backend.Device{CPEID: "c", Paths: []backend.Path{{WAT: "nr", Addr: netip.MustParseAddr("10.0.0.1"), Weight: 256}}}},
		{"negative weight", backend.Device{CPEID: "c", Paths: []backend.Path{{WAT: "nr", Addr: netip.MustParseAddr("10.0.0.1"), Weight: -1}}}},
	}
	ok := backend.Device{CPEID: "b", Paths: []backend.Path{{WAT: "nr", Addr: netip.MustParseAddr("10.0.0.2"), Weight: 4}}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One bad CPE is left out; the others are still written.
			tuples, notApplied := ProxyTuples([]backend.Device{tt.cpe, ok}, MaxProxyTuples)
			if len(notApplied) != 1 || notApplied["c"] == nil || errors.Is(notApplied["c"], ErrTupleBound) {
				t.Fatalf("not applied %v", notApplied)
			}
			if len(tuples) != 1 || tuples[0].Dst != netip.MustParseAddr("10.0.0.2") || tuples[0].Weight != 4 {
				t.Fatalf("tuples %+v", tuples)
			}
		})
	}
}

// TestProxyBound fills the full bound: MaxProxyTuples tuples are written
// and read back (the text stays within one page), one more CPE is left out.
func TestProxyBound(t *testing.T) {
	var cpes []backend.Device
	for i := range MaxProxyTuples/2 + 1 {
		cpes = append(cpes, backend.Device{CPEID: fmt.Sprintf("cpe-%04d", i), Paths: []backend.Path{
			{WAT: "nr", Addr: netip.AddrFrom4([4]byte{255, 255, byte(i), 1}), Weight: 255},
			{WAT: "wifi", Addr: netip.AddrFrom4([4]byte{255, 255, byte(i), 2}), Weight: 0},
		}})
	}
	d, err := NewDownlink(DownlinkConfig{Config: newTree(t)})
	if err != nil {
		t.Fatal(err)
	}
	notApplied, err := d.ApplyAll(context.Background(), cpes)
	if err != nil {
		t.Fatal(err)
	}
	last := fmt.Sprintf("cpe-%04d", MaxProxyTuples/2)
	if len(notApplied) != 1 || !errors.Is(notApplied[last], ErrTupleBound) {
		t.Fatalf("not applied %v", notApplied)
	}
	tuples, _ := ProxyTuples(cpes, MaxProxyTuples)
	text, _ := Format(tuples)
	used, limit := d.Rules()
	if overflow := d.OverflowCPEs(); used != MaxProxyTuples || limit != MaxProxyTuples || overflow != 1 || len(text) > 4096-1 {
		t.Fatalf("Rules = %d, %d, overflow %d; text of %d bytes", used, limit, overflow, len(text))
	}
	t.Logf("%d tuples: %d bytes", len(tuples), len(text))
	for _, bad := range []int{-1, MaxProxyTuples + 1} {
		if _, err := NewDownlink(DownlinkConfig{MaxTuples: bad}); err == nil {
			t.Errorf("MaxTuples %d accepted", bad)
		}
	}
}

func TestProxyWriteErrors(t *testing.T) {
	cpes := []backend.Device{{CPEID: "a", Paths: []backend.Path{{WAT: "nr", Addr: netip.MustParseAddr("10.0.0.1"), Weight: 3}}}}
	d, _ := NewDownlink(DownlinkConfig{Config: Config{ProcSysRoot: t.TempDir(), SysRoot: t.TempDir()}})
	if _, err := d.ApplyAll(context.Background(), cpes); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ApplyAll without the sysctl = %v, want ErrNotExist", err)
	}
	cfg := newTree(t)
	w := filepath.Join(cfg.ProcSysRoot, weightsFile)
	os.Remove(w)
	if err := os.Symlink("/dev/null", w); err != nil {
		t.Fatal(err)
	}
	d, _ = NewDownlink(DownlinkConfig{Config: cfg})
	if _, err := d.ApplyAll(context.Background(), cpes); err == nil || !strings.Contains(err.Error(), "read back") {
		t.Fatalf("ApplyAll = %v, want a read-back error", err)
	}
}
