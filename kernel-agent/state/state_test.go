package state

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcw-xapp/kernel-agent/payload"
)

func TestSaveLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sub")
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Load(); ok || err != nil {
		t.Fatalf("empty store: ok=%v err=%v", ok, err)
	}
	want := Record{Version: 42, Weights: payload.Weights{"nr": 30, "wifi": 100}, Mode: "load_balancing",
		CapsMbps: map[string]float64{"nr": 6.5, "wifi": 21}, LeaseUntilMs: 123, SavedAtMs: 100,
		Classes: []payload.Class{{Name: "control", Mode: "priority", Weights: payload.Weights{"nr": 1, "wifi": 0},
			CapsMbps: map[string]float64{"nr": 2}, Urgent: true, Match: payload.Match{DSCP: []int{46}, Protocols: []int{17},
				RemotePorts: []payload.PortRange{{5000, 5010}}, RemotePrefixes: []netip.Prefix{netip.MustParsePrefix("fd00::/8")},
				Cgroup: "/robot.slice"}}}}
	for i := 0; i < 3; i++ { // overwrite works and leaves no temp files
		if err := s.Save(want); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := s.Load()
	if !ok || err != nil {
		t.Fatalf("Load: ok=%v err=%v", ok, err)
	}
	if diff := cmp.Diff(want, got, prefixes); diff != "" {
		t.Fatalf("Load (-want +got):\n%s", diff)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only %s", len(entries), FileName)
	}
}

func TestLoadRejects(t *testing.T) {
	for name, content := range map[string]string{
		"corrupt":       `{"version":`,
		"all-zero":      `{"version":3,"weights":{"nr":0}}`,
		"out of range":  `{"version":3,"weights":{"nr":300}}`,
		"negative":      `{"version":-1}`,
		"unknown WAT":   `{"version":3,"weights":{"5g":1}}`,
		"cap zero":      `{"version":3,"weights":{"nr":1},"caps_mbps":{"nr":0}}`,
		"cap too big":   `{"version":3,"weights":{"nr":1},"caps_mbps":{"nr":100001}}`,
		"cap unknown":   `{"version":3,"weights":{"nr":1},"caps_mbps":{"5g":1}}`,
		"class invalid": `{"version":3,"weights":{"nr":1},"classes":[{"name":"a","match":{"dscp":[64]},"mode":"priority","weights":{"nr":1}}]}`,
		"classes empty": `{"version":3,"weights":{"nr":1},"classes":[]}`,
		"classes alone": `{"version":3,"classes":[{"name":"a","match":{"dscp":[6]},"mode":"priority","weights":{"nr":1}}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			s, _ := New(t.TempDir())
			if err := os.WriteFile(s.Path(), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := s.Load(); ok || err == nil {
				t.Fatalf("Load(%s): ok=%v err=%v, want an error", content, ok, err)
			}
		})
	}
}

// prefixes compares netip.Prefix values by value (cmp cannot see their
// unexported fields).
var prefixes = cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })
