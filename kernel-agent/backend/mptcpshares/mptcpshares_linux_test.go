//go:build linux

package mptcpshares

import (
	"context"
	"net"
	"net/netip"
	"testing"

	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/internal/nstest"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
)

// rootOf describes the root qdisc of link: "htb" for the backend's, the
// kind otherwise, "" for none.
func rootOf(t *testing.T, h *Handle, link vnl.Link) (kind string, capBps uint64) {
	t.Helper()
	qs, err := h.QdiscList(link)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Attrs().Parent != vnl.HANDLE_ROOT {
			continue
		}
		kind = q.Type()
	}
	if kind != "htb" {
		return kind, 0
	}
	cs, err := h.ClassList(link, rootHandle)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if hc, ok := c.(*vnl.HtbClass); ok && hc.Handle == classHandle {
			checkLeafOf(t, h, link, 1, hc.Rate*8)
			return kind, hc.Rate * 8
		}
	}
	t.Fatalf("htb root on %s without class 1:1", link.Attrs().Name)
	return "", 0
}

// checkLeafOf fails t unless class 1:minor of link has its bfifo (handle
// minor:, 2: for 1:1) holding 100 ms of bps, at least 64 KiB.
func checkLeafOf(t *testing.T, h *Handle, link vnl.Link, minor uint16, bps uint64) {
	t.Helper()
	qs, err := h.BfifoList(link.Attrs().Index)
	if err != nil {
		t.Fatal(err)
	}
	want := Bfifo{Parent: vnl.MakeHandle(1, minor), Handle: vnl.MakeHandle(max(minor, 2), 0), Limit: uint32(max(bps/80, 65536))}
	for _, q := range qs {
		if q.Parent == want.Parent {
			if q != want {
				t.Errorf("%s: leaf of 1:%x = %+v, want %+v", link.Attrs().Name, minor, q, want)
			}
			return
		}
	}
	t.Errorf("%s: class 1:%x without its bfifo", link.Attrs().Name, minor)
}

// TestSharesApplyInNetns: caps are set, changed and removed on real interfaces,
// endpoints follow weight 0, and a root qdisc the backend did not make is
// left alone while its WAT is uncapped.
func TestSharesApplyInNetns(t *testing.T) {
	nstest.Do(t, func(netns.NsHandle) {
		h, err := NewHandle()
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		addrs := map[string]netip.Addr{"nr0": netip.MustParseAddr("10.61.1.1"), "wifi0": netip.MustParseAddr("10.61.2.1")}
		links := vethsWithAddrs(t, h, addrs)
		// The operator's own root qdisc on wifi0.
		tbf := &vnl.Tbf{QdiscAttrs: vnl.QdiscAttrs{LinkIndex: links["wifi0"].Attrs().Index, Handle: vnl.MakeHandle(9, 0), Parent: vnl.HANDLE_ROOT},
			Rate: 10e6 / 8, Limit: 100000, Buffer: 20000}
		if err := h.QdiscAdd(tbf); err != nil {
			t.Fatal(err)
		}
		pm, err := mptcppm.Dial()
		if err != nil {
			t.Fatal(err)
		}
		sf, err := mptcppm.DialDiag()
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(h, pm, sf, map[string]float64{"nr": 24, "wifi": 16}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		paths := func(nr, wifi int) []backend.Path {
			return []backend.Path{
				{WAT: "nr", Interface: "nr0", Index: links["nr0"].Attrs().Index, Addr: addrs["nr0"], Weight: nr},
				{WAT: "wifi", Interface: "wifi0", Index: links["wifi0"].Attrs().Index, Addr: addrs["wifi0"], Weight: wifi},
			}
		}
		for _, step := range []struct {
			name              string
			nr, wifi          int
			nrKind, wifiKind  string
			nrCap, wifiCap    uint64
			nrBackup, wifiBkp bool
		}{
			// T = min(48, 32) = 32: wifi binds (uncapped, its tbf stays),
			// nr capped at 16.
			{"equal", 1, 1, "htb", "tbf", 16e6, 0, false, false},
			// T = min(72, 24) = 24: nr 8.
			{"wifi double", 1, 2, "htb", "tbf", 8e6, 0, false, false},
			// T = min(24*1.5, 48) = 36: nr binds (htb removed), wifi 12
			// (the operator's tbf replaced).
			{"nr double", 2, 1, "noqueue", "htb", 0, 12e6, false, false},
			// wifi off: backup, uncapped; nr alone binds.
			{"wifi off", 1, 0, "noqueue", "noqueue", 0, 0, false, true},
			{"wifi back", 1, 1, "htb", "noqueue", 16e6, 0, false, false},
		} {
			if err := b.Apply(context.Background(), paths(step.nr, step.wifi)); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
			for _, c := range []struct {
				ifc, kind string
				cap       uint64
				backup    bool
			}{{"nr0", step.nrKind, step.nrCap, step.nrBackup}, {"wifi0", step.wifiKind, step.wifiCap, step.wifiBkp}} {
				kind, capBps := rootOf(t, h, links[c.ifc])
				if kind == "" {
					kind = "noqueue"
				}
				if kind != c.kind || capBps != c.cap {
					t.Errorf("%s: %s root %s at %d bit/s, want %s at %d", step.name, c.ifc, kind, capBps, c.kind, c.cap)
				}
				eps, err := pm.Endpoints()
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range eps {
					if e.Addr == addrs[c.ifc] && (e.Flags&mptcppm.FlagBackup != 0) != c.backup {
						t.Errorf("%s: %s endpoint flags %v, want backup %v", step.name, c.ifc, e.Flags, c.backup)
					}
				}
			}
		}
		if err := b.Apply(context.Background(), paths(0, 0)); err == nil {
			t.Error("all weights 0 accepted")
		}
	})
}

// vethsWithAddrs makes one veth per name (peer "p"+name), up, with its /24
// address, in the namespace h works in.
func vethsWithAddrs(t *testing.T, h *Handle, addrs map[string]netip.Addr) map[string]vnl.Link {
	t.Helper()
	links := map[string]vnl.Link{}
	for name, a := range addrs {
		if err := h.LinkAdd(&vnl.Veth{LinkAttrs: vnl.LinkAttrs{Name: name}, PeerName: "p" + name}); err != nil {
			t.Fatal(err)
		}
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.AddrAdd(l, &vnl.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		links[name] = l
	}
	return links
}
