//go:build linux

package mptcpshares

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpupstream"
	"github.com/mcw-xapp/kernel-agent/internal/nstest"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// sendFrom sends one datagram from local port sport to dst:dport.
func sendFrom(t *testing.T, sport int, dst netip.Addr, dport int) {
	t.Helper()
	c, err := net.DialUDP("udp4", &net.UDPAddr{Port: sport}, &net.UDPAddr{IP: dst.AsSlice(), Port: dport})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
}

// TestSharesDownlinkClassesInNetns: a served CPE with traffic classes gets
// a (CPE, WAT) class on each WAT (uncapped ones too) with its leaves and
// a classifier that matches the classes on the packets' source; a CPE
// without classes beside it keeps its flat class; dropping the classes
// brings the flat layout back.
func TestSharesDownlinkClassesInNetns(t *testing.T) {
	nstest.Do(t, func(netns.NsHandle) {
		h, err := NewHandle()
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		links := vethsWithAddrs(t, h, map[string]netip.Addr{"xnr": netip.MustParseAddr("10.64.1.2"), "xwifi": netip.MustParseAddr("10.64.2.2")})
		a := netip.MustParseAddr
		for _, n := range []struct {
			ifc  string
			addr netip.Addr
		}{{"xnr", a("10.64.1.1")}, {"xnr", a("10.64.1.7")}, {"xwifi", a("10.64.2.1")}} {
			peer, err := h.LinkByName("p" + n.ifc)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.LinkSetUp(peer); err != nil {
				t.Fatal(err)
			}
			if err := h.NeighAdd(&vnl.Neigh{LinkIndex: links[n.ifc].Attrs().Index, IP: n.addr.AsSlice(), HardwareAddr: peer.Attrs().HardwareAddr,
				State: vnl.NUD_PERMANENT}); err != nil {
				t.Fatal(err)
			}
		}
		onoff, err := mptcpupstream.DialDownlink(nil)
		if err != nil {
			t.Fatal(err)
		}
		d, err := NewDownlink(DownlinkConfig{NL: h, OnOff: onoff, LinkMbps: map[string]float64{"nr": 20, "wifi": 20}})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if c := d.Capabilities(); c.MaxClasses != payload.MaxClasses {
			t.Fatalf("capabilities %+v: want max_classes %d", c, payload.MaxClasses)
		}
		// cpe-a: nr uncapped (its share is its link), wifi capped at 8.57.
		cpeA := backend.Device{CPEID: "cpe-a", Paths: []backend.Path{
			{WAT: "nr", Addr: a("10.64.1.1"), Weight: 70},
			{WAT: "wifi", Addr: a("10.64.2.1"), Weight: 30},
		}, Classes: []backend.Class{
			{Name: "video", Match: payload.Match{RemotePorts: []payload.PortRange{{7000, 7000}}}, Weights: payload.Weights{"nr": 1, "wifi": 0}},
			{Name: "voice", Match: payload.Match{RemotePrefixes: []netip.Prefix{netip.MustParsePrefix("10.64.0.0/16")}, DSCP: []int{46}},
				Urgent: true, Weights: payload.Weights{"nr": 1, "wifi": 1}, CapsMbps: map[string]float64{"wifi": 1}},
		}}
		// cpe-b, without classes, capped on nr.
		cpeB := backend.Device{CPEID: "cpe-b", Paths: []backend.Path{{WAT: "nr", Addr: a("10.64.1.7"), Weight: 1, CapMbps: 3}}}
		notApplied, err := d.ApplyAll(context.Background(), []backend.Device{cpeA, cpeB})
		if err != nil || len(notApplied) != 0 {
			t.Fatalf("ApplyAll: %v %v", notApplied, err)
		}
		wantApplied := map[string]payload.AppliedClass{
			"video": {CapsMbps: map[string]float64{"wifi": 0.064}},
			"voice": {CapsMbps: map[string]float64{"wifi": 1}, Urgent: true},
		}
		if diff := cmp.Diff(wantApplied, d.AppliedClasses("cpe-a")); diff != "" {
			t.Errorf("applied classes (-want +got):\n%s", diff)
		}
		if d.AppliedClasses("cpe-b") != nil {
			t.Errorf("cpe-b without classes reports %v", d.AppliedClasses("cpe-b"))
		}
		if diff := cmp.Diff(map[string]float64{"wifi": 8.571428}, d.AppliedCaps("cpe-a")); diff != "" {
			t.Errorf("applied caps (-want +got):\n%s", diff)
		}
		// Minors by key order: cpe-a/nr 2, its default leaf 3, video 4,
		// voice 5; cpe-a/wifi 6, 7, 8, 9; cpe-b/nr 10.
		nr := viewHTB(t, h, links["xnr"])
		noPackets := cmp.Transformer("", func(v htbClassView) htbClassView { v.packets = 0; return v })
		wantNR := htbView{classes: map[uint16]htbClassView{
			2: {parent: 0xffff, ceil: unlimitedBps},
			3: {parent: 2, ceil: unlimitedBps, prio: 1},
			4: {parent: 2, ceil: unlimitedBps, prio: 1},
			5: {parent: 2, ceil: unlimitedBps, prio: 0},
			// cpe-b's flat class.
			10: {parent: 0xffff, ceil: 3e6},
		}}
		if diff := cmp.Diff(wantNR, nr, cmp.AllowUnexported(htbView{}, htbClassView{}), noPackets); diff != "" {
			t.Errorf("xnr (-want +got):\n%s", diff)
		}
		wantWiFi := htbView{classes: map[uint16]htbClassView{
			6: {parent: 0xffff, ceil: 8_571_424},
			7: {parent: 6, ceil: 8_571_424, prio: 1},
			8: {parent: 6, ceil: minCapBps, prio: 1},
			9: {parent: 6, ceil: 1e6, prio: 0},
		}}
		bytesGrain := cmp.Comparer(func(x, y uint64) bool { return x/8 == y/8 })
		if diff := cmp.Diff(wantWiFi, viewHTB(t, h, links["xwifi"]), cmp.AllowUnexported(htbView{}, htbClassView{}), noPackets, bytesGrain); diff != "" {
			t.Errorf("xwifi (-want +got):\n%s", diff)
		}

		// Packets to cpe-a on nr: from port 7000 to video, DSCP 46 from
		// 10.64.1.2 (inside voice's prefix) to voice, others to the
		// default leaf; to cpe-b to its own class.
		send := func(sport int) { sendFrom(t, sport, a("10.64.1.1"), 9) }
		before := viewHTB(t, h, links["xnr"])
		send(7000)
		send(7000)
		send(7001)
		sendUDP(t, a("10.64.1.1"), 9, 46)
		sendFrom(t, 7000, a("10.64.1.7"), 9)
		after := viewHTB(t, h, links["xnr"])
		for minor, n := range map[uint16]uint64{4: 2, 3: 1, 5: 1, 10: 1} {
			// The default leaf also carries what the kernel sends by
			// itself (IPv6 router solicitations...).
			if got := after.classes[minor].packets - before.classes[minor].packets; got != n && (minor != 3 || got < n) {
				t.Errorf("xnr class 1:%x sent %d packets, want %d", minor, got, n)
			}
		}

		// Classes dropped: cpe-a's nr class goes (uncapped), wifi's is
		// flat again with its bfifo; cpe-b untouched.
		cpeA.Classes = nil
		if notApplied, err := d.ApplyAll(context.Background(), []backend.Device{cpeA, cpeB}); err != nil || len(notApplied) != 0 {
			t.Fatalf("ApplyAll without classes: %v %v", notApplied, err)
		}
		if v := viewHTB(t, h, links["xnr"]); len(v.classes) != 1 || v.classes[10].ceil != 3e6 {
			t.Errorf("xnr without classes: %+v", v)
		}
		if v := viewHTB(t, h, links["xwifi"]); len(v.classes) != 1 || v.classes[6].ceil/8 != 8_571_424/8 {
			t.Errorf("xwifi without classes: %+v", v)
		} else {
			checkLeafOf(t, h, links["xwifi"], 6, v.classes[6].ceil)
		}
		if d.AppliedClasses("cpe-a") != nil {
			t.Errorf("classes reported after they were dropped: %v", d.AppliedClasses("cpe-a"))
		}
		for _, ifc := range []string{"xnr", "xwifi"} {
			for minor := range 12 {
				cs, err := h.ClassifierList(links[ifc].Attrs().Index, vnl.MakeHandle(1, uint16(minor)))
				if err != nil {
					t.Fatal(err)
				}
				if len(cs) != 0 {
					t.Errorf("%s: classifier left on 1:%s", ifc, strconv.Itoa(minor))
				}
			}
		}
	})
}
