//go:build linux

package mptcpshares

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/google/go-cmp/cmp"
	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpshares/cgroupmark"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpshares/pacing"
	"github.com/mcw-xapp/kernel-agent/internal/nstest"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// htbView is a CPE interface's HTB as read back: the root's default
// class and per class minor its parent minor, ceil (bit/s), priority and
// packets sent.
type htbView struct {
	defcls  uint32
	classes map[uint16]htbClassView
}

type htbClassView struct {
	parent  uint16
	ceil    uint64
	prio    uint32
	packets uint64
}

func viewHTB(t *testing.T, h *Handle, link vnl.Link) htbView {
	t.Helper()
	v := htbView{classes: map[uint16]htbClassView{}}
	qs, err := h.QdiscList(link)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if hq, ok := q.(*vnl.Htb); ok && hq.Parent == vnl.HANDLE_ROOT {
			v.defcls = hq.Defcls
		}
	}
	cs, err := h.ClassList(link, rootHandle)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		hc, ok := c.(*vnl.HtbClass)
		if !ok {
			continue
		}
		cv := htbClassView{parent: uint16(hc.Parent), ceil: hc.Ceil * 8, prio: hc.Prio}
		if hc.Statistics != nil && hc.Statistics.Basic != nil {
			cv.packets = uint64(hc.Statistics.Basic.Packets)
		}
		v.classes[uint16(hc.Handle)] = cv
	}
	return v
}

// sendUDP sends one datagram with DSCP dscp to dst:port from the calling
// thread's namespace.
func sendUDP(t *testing.T, dst netip.Addr, port, dscp int) {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, dscp<<2) }); err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("udp4", net.JoinHostPort(dst.String(), strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
}

// TestSharesClassesInNetns: classes turn a WAT's flat cap into a parent
// with leaves (a WAT left uncapped gets one too), leaves get their
// ceilings and priorities, the classifier sends real packets to them,
// the backup flag stays off a WAT a class uses, and removing the classes
// brings the flat layout back.
func TestSharesClassesInNetns(t *testing.T) {
	nstest.Do(t, func(netns.NsHandle) {
		h, err := NewHandle()
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		addrs := map[string]netip.Addr{"nr0": netip.MustParseAddr("10.62.1.1"), "wifi0": netip.MustParseAddr("10.62.2.1")}
		links := vethsWithAddrs(t, h, addrs)
		// A neighbour behind each interface, so that datagrams leave by it.
		remote := map[string]netip.Addr{"nr0": netip.MustParseAddr("10.62.1.99"), "wifi0": netip.MustParseAddr("10.62.2.99")}
		for ifc, a := range remote {
			peer, err := h.LinkByName("p" + ifc)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.LinkSetUp(peer); err != nil {
				t.Fatal(err)
			}
			if err := h.NeighAdd(&vnl.Neigh{LinkIndex: links[ifc].Attrs().Index, IP: a.AsSlice(), HardwareAddr: peer.Attrs().HardwareAddr,
				State: vnl.NUD_PERMANENT}); err != nil {
				t.Fatal(err)
			}
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
		if got := b.Capabilities().MaxClasses; got != payload.MaxClasses {
			t.Fatalf("max_classes %d, want %d", got, payload.MaxClasses)
		}
		paths := []backend.Path{
			{WAT: "nr", Interface: "nr0", Index: links["nr0"].Attrs().Index, Addr: addrs["nr0"], Weight: 1},
			{WAT: "wifi", Interface: "wifi0", Index: links["wifi0"].Attrs().Index, Addr: addrs["wifi0"], Weight: 0},
		}
		// Flat first: nr alone, uncapped (its share is its link); wifi off.
		if err := b.Apply(context.Background(), paths); err != nil {
			t.Fatal(err)
		}
		classes := []backend.Class{
			{Name: "control", Match: payload.Match{RemotePorts: []payload.PortRange{{5000, 5000}}}, Urgent: true,
				Weights: payload.Weights{"nr": 1, "wifi": 0}, CapsMbps: map[string]float64{"nr": 2}},
			{Name: "video", Match: payload.Match{DSCP: []int{8}}, Weights: payload.Weights{"nr": 0, "wifi": 1}},
		}
		if err := b.ApplyClasses(context.Background(), paths, classes); err != nil {
			t.Fatal(err)
		}
		const unlimited = unlimitedBps
		wantNR := htbView{defcls: 2, classes: map[uint16]htbClassView{
			1:    {parent: 0xffff, ceil: unlimited},
			2:    {parent: 1, ceil: unlimited, prio: 1}, // the default rule uses nr
			0x10: {parent: 1, ceil: 2e6, prio: 0},       // control: its cap, urgent
			0x11: {parent: 1, ceil: minCapBps, prio: 1}, // video does not use nr
		}}
		wantWiFi := htbView{defcls: 2, classes: map[uint16]htbClassView{
			1:    {parent: 0xffff, ceil: unlimited},
			2:    {parent: 1, ceil: minCapBps, prio: 1}, // weight 0, and video uses wifi
			0x10: {parent: 1, ceil: minCapBps, prio: 0},
			0x11: {parent: 1, ceil: unlimited, prio: 1},
		}}
		noPackets := cmp.Transformer("", func(v htbClassView) htbClassView { v.packets = 0; return v })
		if diff := cmp.Diff(wantNR, viewHTB(t, h, links["nr0"]), cmp.AllowUnexported(htbView{}, htbClassView{}), noPackets); diff != "" {
			t.Errorf("nr0 (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantWiFi, viewHTB(t, h, links["wifi0"]), cmp.AllowUnexported(htbView{}, htbClassView{}), noPackets); diff != "" {
			t.Errorf("wifi0 (-want +got):\n%s", diff)
		}
		// The urgent leaf is guaranteed a tenth of its ceiling (it sends
		// that without waiting for its parent), the others the floor.
		cs, err := h.ClassList(links["nr0"], rootHandle)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []struct {
			minor uint16
			rate  uint64
		}{{0x10, 200_000}, {0x11, minCapBps}, {2, minCapBps}} {
			if !slices.ContainsFunc(cs, func(c vnl.Class) bool {
				hc, ok := c.(*vnl.HtbClass)
				return ok && hc.Handle == vnl.MakeHandle(1, want.minor) && hc.Rate*8 == want.rate
			}) {
				t.Errorf("nr0: class 1:%x is not guaranteed %d bit/s", want.minor, want.rate)
			}
		}
		for _, ifc := range []string{"nr0", "wifi0"} {
			for minor, bps := range map[uint16]uint64{2: map[string]uint64{"nr0": unlimited, "wifi0": minCapBps}[ifc], 0x10: map[string]uint64{"nr0": 2e6, "wifi0": minCapBps}[ifc]} {
				checkLeafOf(t, h, links[ifc], minor, bps)
			}
		}
		wantApplied := map[string]payload.AppliedClass{
			"control": {CapsMbps: map[string]float64{"nr": 2, "wifi": 0.064}, Urgent: true},
			"video":   {CapsMbps: map[string]float64{"nr": 0.064}},
		}
		if diff := cmp.Diff(wantApplied, b.AppliedClasses()); diff != "" {
			t.Errorf("applied classes (-want +got):\n%s", diff)
		}
		eps, err := pm.Endpoints()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range eps {
			if e.Flags&mptcppm.FlagBackup != 0 {
				t.Errorf("endpoint %s backup: video uses wifi", e.Addr)
			}
		}

		// Real packets: port 5000 to control, DSCP 8 to video, the rest
		// to the default leaf, on the interface they leave by.
		before := viewHTB(t, h, links["nr0"])
		sendUDP(t, remote["nr0"], 5000, 0)
		sendUDP(t, remote["nr0"], 5000, 8) // control comes first
		sendUDP(t, remote["nr0"], 6000, 8)
		sendUDP(t, remote["nr0"], 6000, 0)
		sendUDP(t, remote["nr0"], 6000, 0)
		sendUDP(t, remote["nr0"], 6000, 0)
		after := viewHTB(t, h, links["nr0"])
		for minor, n := range map[uint16]uint64{0x10: 2, 0x11: 1, 2: 3} {
			// The default leaf also carries what the kernel sends by
			// itself (IPv6 router solicitations...).
			if got := after.classes[minor].packets - before.classes[minor].packets; got != n && (minor != 2 || got < n) {
				t.Errorf("nr0 class 1:%x sent %d packets, want %d", minor, got, n)
			}
		}

		// Another class set: one class, the stale leaf goes; the
		// classifier is replaced.
		if err := b.ApplyClasses(context.Background(), paths, classes[1:]); err != nil {
			t.Fatal(err)
		}
		if v := viewHTB(t, h, links["nr0"]); len(v.classes) != 3 || v.classes[0x10].ceil != minCapBps {
			t.Errorf("one class left: %+v", v)
		}
		// No classes: the flat layout again (nr uncapped: no root;
		// wifi off, back to backup).
		if err := b.Apply(context.Background(), paths); err != nil {
			t.Fatal(err)
		}
		for _, ifc := range []string{"nr0", "wifi0"} {
			if kind, _ := rootOf(t, h, links[ifc]); kind == "htb" {
				t.Errorf("%s keeps an htb root without classes", ifc)
			}
		}
		paths[1].Weight = 1 // both capped (T = min(48, 32) = 32: nr 16, wifi 16 = its link)
		if err := b.ApplyClasses(context.Background(), paths, classes); err != nil {
			t.Fatal(err)
		}
		if v := viewHTB(t, h, links["nr0"]); v.classes[1].ceil != 16e6 || v.classes[2].ceil != 16e6 || v.classes[0x10].ceil != 2e6 {
			t.Errorf("capped nr with classes: %+v", v)
		}
		if err := b.Apply(context.Background(), paths); err != nil {
			t.Fatal(err)
		}
		if kind, capBps := rootOf(t, h, links["nr0"]); kind != "htb" || capBps != 16e6 {
			t.Errorf("flat again: nr0 %s at %d", kind, capBps)
		}
		if b.AppliedClasses() != nil {
			t.Errorf("applied classes without classes: %v", b.AppliedClasses())
		}
	})
}

// TestSharesCgroupClassInNetns: a class that matches a cgroup takes the
// packets of sockets made in that cgroup (marked by the program the
// backend attaches there) and no others; without it the program is
// detached. A backend without a marker refuses such a class.
func TestSharesCgroupClassInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads a BPF program and makes a cgroup")
	}
	mount, err := pacing.CgroupV2Mount()
	if err != nil {
		t.Skip(err)
	}
	rel := "/mcw-classes-test-" + strconv.Itoa(os.Getpid())
	cg := filepath.Join(mount, rel)
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(cg) })
	marker, err := cgroupmark.New()
	if err != nil {
		t.Fatal(err)
	}
	classes := []backend.Class{{Name: "app", Match: payload.Match{Cgroup: rel}, Urgent: true, Weights: payload.Weights{"nr": 1}}}
	nstest.Do(t, func(netns.NsHandle) {
		h, err := NewHandle()
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		links := vethsWithAddrs(t, h, map[string]netip.Addr{"nr0": netip.MustParseAddr("10.65.1.1")})
		peer, err := h.LinkByName("pnr0")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(peer); err != nil {
			t.Fatal(err)
		}
		remote := netip.MustParseAddr("10.65.1.99")
		if err := h.NeighAdd(&vnl.Neigh{LinkIndex: links["nr0"].Attrs().Index, IP: remote.AsSlice(), HardwareAddr: peer.Attrs().HardwareAddr,
			State: vnl.NUD_PERMANENT}); err != nil {
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
		paths := []backend.Path{{WAT: "nr", Interface: "nr0", Index: links["nr0"].Attrs().Index, Addr: netip.MustParseAddr("10.65.1.1"), Weight: 1}}
		bare, err := New(h, pm, sf, map[string]float64{"nr": 24}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := bare.CheckClasses([]payload.Class{{Name: "app", Match: payload.Match{Cgroup: rel}}}); err == nil || !strings.Contains(err.Error(), "CAP_BPF") {
			t.Errorf("a backend without marker: %v, want a refusal naming CAP_BPF", err)
		}
		b, err := New(h, pm, sf, map[string]float64{"nr": 24}, nil, marker)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := b.CheckClasses([]payload.Class{{Name: "app", Match: payload.Match{Cgroup: rel + "-absent"}}}); err == nil {
			t.Error("a cgroup that does not exist accepted")
		}
		if err := b.ApplyClasses(context.Background(), paths, classes); err != nil {
			t.Fatal(err)
		}
		before := viewHTB(t, h, links["nr0"])
		sendUDP(t, remote, 9, 0) // from outside the cgroup
		if err := pacing.WithProcessIn(cg, func() error {
			sendUDP(t, remote, 9, 0)
			sendUDP(t, remote, 9, 0)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		after := viewHTB(t, h, links["nr0"])
		for minor, n := range map[uint16]uint64{0x10: 2, 2: 1} {
			if got := after.classes[minor].packets - before.classes[minor].packets; got != n && (minor != 2 || got < n) {
				t.Errorf("class 1:%x sent %d packets, want %d", minor, got, n)
			}
		}
		if err := b.ApplyClasses(context.Background(), paths, nil); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(cg)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		q, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupInetEgress})
		if err != nil {
			t.Fatal(err)
		}
		if len(q.Programs) != 0 {
			t.Errorf("%d programs left on the cgroup without classes", len(q.Programs))
		}
	})
}
