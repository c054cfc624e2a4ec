//go:build linux

package mptcpshares

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netns"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpshares/pacing"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpupstream"
	"github.com/mcw-xapp/kernel-agent/internal/nstest"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
)

// pacer attaches a real pacer, keyed by by, to a fresh cgroup (removed at
// the end).
func pacer(t *testing.T, by pacing.KeyBy) *pacing.Pacer {
	t.Helper()
	mount, err := pacing.CgroupV2Mount()
	if err != nil {
		t.Skip(err)
	}
	cg := filepath.Join(mount, "mcw-shares-paced-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(cg) })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p, err := pacing.Attach(ctx, cg, by)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSharesPacedInNetns: the CPE backend with the pacing enforcer writes
// the same caps as HTB would into the pacer's map, per WAT address,
// clears uncapped WATs and addresses a WAT left, reports what it reads
// back, touches no qdisc, and flags weight 0 backup.
func TestSharesPacedInNetns(t *testing.T) {
	p := pacer(t, pacing.LocalAddr)
	nstest.Do(t, func(netns.NsHandle) {
		h, err := NewHandle()
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		addrs := map[string]netip.Addr{"nr0": netip.MustParseAddr("10.62.1.1"), "wifi0": netip.MustParseAddr("10.62.2.1")}
		links := vethsWithAddrs(t, h, addrs)
		pm, err := mptcppm.Dial()
		if err != nil {
			t.Fatal(err)
		}
		sf, err := mptcppm.DialDiag()
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewPaced(pm, sf, p, map[string]float64{"nr": 24, "wifi": 16})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		nrMoved := netip.MustParseAddr("10.62.1.9")
		paths := func(nr, wifi int, nrAddr netip.Addr, capNR float64) []backend.Path {
			return []backend.Path{
				{WAT: "nr", Interface: "nr0", Index: links["nr0"].Attrs().Index, Addr: nrAddr, Weight: nr, CapMbps: capNR},
				{WAT: "wifi", Interface: "wifi0", Index: links["wifi0"].Attrs().Index, Addr: addrs["wifi0"], Weight: wifi},
			}
		}
		for _, step := range []struct {
			name       string
			paths      []backend.Path
			want       map[netip.Addr]uint64 // the pacer's map, bit/s
			applied    map[string]float64
			wifiBackup bool
		}{
			// T = min(48, 32) = 32: nr capped at 16, wifi uncapped.
			{"equal", paths(1, 1, addrs["nr0"], 0), map[netip.Addr]uint64{addrs["nr0"]: 16e6}, map[string]float64{"nr": 16}, false},
			// T = 36: nr uncapped (cleared), wifi 12.
			{"nr double", paths(2, 1, addrs["nr0"], 0), map[netip.Addr]uint64{addrs["wifi0"]: 12e6}, map[string]float64{"wifi": 12}, false},
			// The message's caps: nr 5 on its new address; the old one
			// is not left capped. wifi has no cap in the message.
			{"caps, nr moved", paths(1, 1, nrMoved, 5), map[netip.Addr]uint64{nrMoved: 5e6}, map[string]float64{"nr": 5}, false},
			// wifi off: backup, uncapped; nr alone binds (uncapped).
			{"wifi off", paths(1, 0, nrMoved, 0), map[netip.Addr]uint64{}, map[string]float64{}, true},
			// nr without an address: nothing to pace on it.
			{"nr no address", paths(1, 1, netip.Addr{}, 0), map[netip.Addr]uint64{}, map[string]float64{}, false},
		} {
			if err := b.Apply(context.Background(), step.paths); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
			got, err := p.Caps()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(step.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("%s: pacer map (-want +got):\n%s", step.name, diff)
			}
			if diff := cmp.Diff(step.applied, b.AppliedCaps()); diff != "" {
				t.Errorf("%s: applied caps (-want +got):\n%s", step.name, diff)
			}
			for name, l := range links {
				if kind, _ := rootOf(t, h, l); kind == "htb" {
					t.Errorf("%s: %s has an HTB root with the pacing enforcer", step.name, name)
				}
			}
			eps, err := pm.Endpoints()
			if err != nil {
				t.Fatal(err)
			}
			for _, ep := range eps {
				if backup := ep.Flags&mptcppm.FlagBackup != 0; ep.Addr == addrs["wifi0"] && backup != step.wifiBackup {
					t.Errorf("%s: wifi endpoint backup %v, want %v", step.name, backup, step.wifiBackup)
				}
			}
		}
		// Two WATs on one address cannot be told apart by a pacer: refused.
		same := paths(1, 1, addrs["wifi0"], 0)
		if err := b.Apply(context.Background(), same); err == nil || !strings.Contains(err.Error(), "share address") {
			t.Errorf("two WATs on one address: %v, want refused", err)
		}
	})
}

// TestSharesDownlinkPacedInNetns: the proxy's downlink with the pacing
// enforcer caps each CPE's WAT addresses in the pacer's map (no route or
// class needed), clears what a CPE no longer caps, refuses a second CPE
// on the same address and applies the bound.
func TestSharesDownlinkPacedInNetns(t *testing.T) {
	p := pacer(t, pacing.RemoteAddr)
	nstest.Do(t, func(netns.NsHandle) {
		onoff, err := mptcpupstream.DialDownlink(nil)
		if err != nil {
			t.Fatal(err)
		}
		d, err := NewDownlink(DownlinkConfig{OnOff: onoff, Pacer: p, LinkMbps: map[string]float64{"nr": 20, "wifi": 20}, MaxClasses: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		a := netip.MustParseAddr
		cpe := func(id string, nr, wifi netip.Addr, wn, ww int, capNR float64) backend.Device {
			return backend.Device{CPEID: id, Paths: []backend.Path{
				{WAT: "nr", Addr: nr, Weight: wn, CapMbps: capNR},
				{WAT: "wifi", Addr: wifi, Weight: ww},
			}}
		}
		for _, step := range []struct {
			name    string
			cpes    []backend.Device
			want    map[netip.Addr]uint64
			applied map[string]map[string]float64
			refused []string
		}{
			// 70/30 from the link rates: wifi 8.57 (nr uncapped); cpe-b
			// 1/1 with caps nr 3 (wifi uncapped: the message gives none).
			{"two CPEs", []backend.Device{
				cpe("cpe-a", a("10.64.1.1"), a("10.64.2.1"), 70, 30, 0),
				cpe("cpe-b", a("10.64.1.7"), a("fd64:2::7"), 1, 1, 3),
			}, map[netip.Addr]uint64{a("10.64.2.1"): 8571424, a("10.64.1.7"): 3e6},
				map[string]map[string]float64{"cpe-a": {"wifi": 8.571424}, "cpe-b": {"nr": 3}}, nil},
			// cpe-b gone, cpe-a equal: every cap cleared.
			{"caps cleared", []backend.Device{cpe("cpe-a", a("10.64.1.1"), a("10.64.2.1"), 1, 1, 0)},
				map[netip.Addr]uint64{}, map[string]map[string]float64{}, nil},
			// cpe-c behind cpe-a's nr address: refused, cpe-a kept.
			{"shared address", []backend.Device{
				cpe("cpe-a", a("10.64.1.1"), a("10.64.2.1"), 1, 3, 0),
				cpe("cpe-c", a("10.64.1.1"), a("10.64.2.9"), 1, 3, 0),
			}, map[netip.Addr]uint64{a("10.64.1.1"): 6666664}, map[string]map[string]float64{"cpe-a": {"nr": 6.666664}}, []string{"cpe-c"}},
		} {
			notApplied, err := d.ApplyAll(context.Background(), step.cpes)
			if err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
			var refused []string
			for id := range notApplied {
				refused = append(refused, id)
			}
			if diff := cmp.Diff(step.refused, refused); diff != "" {
				t.Errorf("%s: refused (-want +got):\n%s (%v)", step.name, diff, notApplied)
			}
			got, err := p.Caps()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(step.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("%s: pacer map (-want +got):\n%s", step.name, diff)
			}
			for id, w := range step.applied {
				if diff := cmp.Diff(w, d.AppliedCaps(id)); diff != "" {
					t.Errorf("%s: %s applied caps (-want +got):\n%s", step.name, id, diff)
				}
			}
		}
	})
}
