//go:build linux

package mptcpshares

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpupstream"
	"github.com/mcw-xapp/kernel-agent/internal/nstest"
)

// downlinkView is what the kernel holds on one interface: the root's kind
// and per class minor its rate (bit/s) and the destination its filter
// matches.
type downlinkView struct {
	root    string
	classes map[uint16]uint64
	dst     map[uint16]string
}

func viewOf(t *testing.T, h *Handle, link vnl.Link) downlinkView {
	t.Helper()
	v := downlinkView{classes: map[uint16]uint64{}, dst: map[uint16]string{}}
	qs, err := h.QdiscList(link)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Attrs().Parent == vnl.HANDLE_ROOT {
			v.root = q.Type()
		}
	}
	if v.root != "htb" {
		return v
	}
	cs, err := h.ClassList(link, rootHandle)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if hc, ok := c.(*vnl.HtbClass); ok {
			v.classes[uint16(hc.Handle&0xffff)] = hc.Rate * 8
			checkLeafOf(t, h, link, uint16(hc.Handle&0xffff), hc.Rate*8)
		}
	}
	fs, err := h.FilterList(link, rootHandle)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		u, ok := f.(*vnl.U32)
		if !ok || u.Sel == nil || u.ClassId == 0 {
			continue
		}
		var b []byte
		for _, k := range u.Sel.Keys {
			b = append(b, byte(k.Val>>24), byte(k.Val>>16), byte(k.Val>>8), byte(k.Val))
		}
		a, _ := netip.AddrFromSlice(b)
		if uint16(u.ClassId&0xffff) != u.Priority {
			t.Errorf("filter at preference %d sends to class %x", u.Priority, u.ClassId)
		}
		v.dst[u.Priority] = a.String()
	}
	return v
}

// TestSharesDownlinkInNetns: per-CPE caps on the proxy's egress interfaces, the
// interface chosen by the route to each CPE address; caps from the link
// rates and from the message; classes removed with their CPE and the root
// with its last class; the class bound.
func TestSharesDownlinkInNetns(t *testing.T) {
	nstest.Do(t, func(netns.NsHandle) {
		h, err := NewHandle()
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		links := map[string]vnl.Link{}
		for i, name := range []string{"xnr", "xwifi"} {
			if err := h.LinkAdd(&vnl.Veth{LinkAttrs: vnl.LinkAttrs{Name: name}, PeerName: "p" + name}); err != nil {
				t.Fatal(err)
			}
			l, err := h.LinkByName(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.AddrAdd(l, &vnl.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 63, byte(i+1), 2), Mask: net.CIDRMask(24, 32)}}); err != nil {
				t.Fatal(err)
			}
			if err := h.AddrAdd(l, &vnl.Addr{IPNet: &net.IPNet{IP: net.ParseIP("fd63:" + string(rune('1'+i)) + "::2"), Mask: net.CIDRMask(64, 128)}, Flags: 0x80 /* IFA_F_NODAD */}); err != nil {
				t.Fatal(err)
			}
			if err := h.LinkSetUp(l); err != nil {
				t.Fatal(err)
			}
			links[name] = l
		}
		onoff, err := mptcpupstream.DialDownlink(nil)
		if err != nil {
			t.Fatal(err)
		}
		d, err := NewDownlink(DownlinkConfig{NL: h, OnOff: onoff, LinkMbps: map[string]float64{"nr": 20, "wifi": 20}, MaxClasses: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if c := d.Capabilities(); c.Semantics != "rate-caps" || !c.DirectionsCoupled {
			t.Fatalf("capabilities %+v", c)
		}
		a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
		cpeA := func(nr, wifi int, capNR, capWifi float64) backend.Device {
			return backend.Device{CPEID: "cpe-a", Paths: []backend.Path{
				{WAT: "nr", Addr: a("10.63.1.1"), Weight: nr, CapMbps: capNR},
				{WAT: "wifi", Addr: a("10.63.2.1"), Weight: wifi, CapMbps: capWifi},
			}}
		}
		// cpe-b's wifi is IPv6.
		cpeB := backend.Device{CPEID: "cpe-b", Paths: []backend.Path{
			{WAT: "nr", Addr: a("10.63.1.7"), Weight: 1, CapMbps: 3},
			{WAT: "wifi", Addr: a("fd63:2::7"), Weight: 1, CapMbps: 2},
		}}
		type want struct {
			nr, wifi downlinkView
			caps     map[string]map[string]float64
			refused  []string
		}
		for _, step := range []struct {
			name string
			cpes []backend.Device
			want want
		}{
			// T = min(20/0.7, 20/0.3) = 28.57: nr's share is its link
			// (uncapped), wifi 8.57.
			{"70/30 from the link rates", []backend.Device{cpeA(70, 30, 0, 0)}, want{
				nr:   downlinkView{root: "noqueue"},
				wifi: downlinkView{root: "htb", classes: map[uint16]uint64{2: 8_571_424}, dst: map[uint16]string{2: "10.63.2.1"}},
				caps: map[string]map[string]float64{"cpe-a": {"wifi": 8.571428}},
			}},
			{"caps from the message", []backend.Device{cpeA(70, 30, 14, 6)}, want{
				nr:   downlinkView{root: "htb", classes: map[uint16]uint64{3: 14e6}, dst: map[uint16]string{3: "10.63.1.1"}},
				wifi: downlinkView{root: "htb", classes: map[uint16]uint64{2: 6e6}, dst: map[uint16]string{2: "10.63.2.1"}},
				caps: map[string]map[string]float64{"cpe-a": {"nr": 14, "wifi": 6}},
			}},
			// cpe-b needs 2 classes, 1 is left under the bound of 3.
			{"bound", []backend.Device{cpeA(70, 30, 14, 6), cpeB}, want{
				nr:      downlinkView{root: "htb", classes: map[uint16]uint64{3: 14e6}, dst: map[uint16]string{3: "10.63.1.1"}},
				wifi:    downlinkView{root: "htb", classes: map[uint16]uint64{2: 6e6}, dst: map[uint16]string{2: "10.63.2.1"}},
				caps:    map[string]map[string]float64{"cpe-a": {"nr": 14, "wifi": 6}},
				refused: []string{"cpe-b"},
			}},
			// wifi at 0: uncapped (backup), its class goes; cpe-b fits.
			{"wifi off, second CPE", []backend.Device{cpeA(1, 0, 14, 6), cpeB}, want{
				nr:   downlinkView{root: "htb", classes: map[uint16]uint64{3: 14e6, 2: 3e6}, dst: map[uint16]string{3: "10.63.1.1", 2: "10.63.1.7"}},
				wifi: downlinkView{root: "htb", classes: map[uint16]uint64{4: 2e6}, dst: map[uint16]string{4: "fd63:2::7"}},
				caps: map[string]map[string]float64{"cpe-a": {"nr": 14}, "cpe-b": {"nr": 3, "wifi": 2}},
			}},
			// cpe-a no longer served: its class goes; cpe-b keeps its
			// minors.
			{"first CPE gone", []backend.Device{cpeB}, want{
				nr:   downlinkView{root: "htb", classes: map[uint16]uint64{2: 3e6}, dst: map[uint16]string{2: "10.63.1.7"}},
				wifi: downlinkView{root: "htb", classes: map[uint16]uint64{4: 2e6}, dst: map[uint16]string{4: "fd63:2::7"}},
				caps: map[string]map[string]float64{"cpe-b": {"nr": 3, "wifi": 2}},
			}},
			{"nothing served", nil, want{nr: downlinkView{root: "noqueue"}, wifi: downlinkView{root: "noqueue"}, caps: map[string]map[string]float64{}}},
		} {
			notApplied, err := d.ApplyAll(context.Background(), step.cpes)
			if err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
			var refused []string
			for id, why := range notApplied {
				refused = append(refused, id)
				if !strings.Contains(why.Error(), "bound of 3") {
					t.Errorf("%s: %s refused for %v", step.name, id, why)
				}
			}
			if diff := cmp.Diff(step.want.refused, refused); diff != "" {
				t.Errorf("%s: refused (-want +got):\n%s", step.name, diff)
			}
			got := want{nr: viewOf(t, h, links["xnr"]), wifi: viewOf(t, h, links["xwifi"]), caps: map[string]map[string]float64{}}
			for _, c := range step.cpes {
				if m := d.AppliedCaps(c.CPEID); m != nil {
					got.caps[c.CPEID] = m
				}
			}
			got.refused = step.want.refused
			for _, v := range []*downlinkView{&got.nr, &got.wifi} {
				if v.root == "" {
					v.root = "noqueue"
				}
				if len(v.classes) == 0 {
					v.classes, v.dst = nil, nil
				}
			}
			// HTB stores rates in bytes per second: compare at that grain.
			opt := cmp.Comparer(func(x, y uint64) bool { return x/8 == y/8 })
			if diff := cmp.Diff(step.want, got, cmp.AllowUnexported(want{}, downlinkView{}), opt); diff != "" {
				t.Errorf("%s (-want +got):\n%s", step.name, diff)
			}
		}
	})
}
