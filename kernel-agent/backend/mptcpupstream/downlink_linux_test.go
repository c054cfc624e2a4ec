//go:build linux

package mptcpupstream

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/internal/nstest"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
)

var (
	dlNrCPE     = netip.MustParseAddr("10.51.1.1")
	dlNrProxy   = netip.MustParseAddr("10.51.1.2")
	dlWifiCPE   = netip.MustParseAddr("10.51.2.1")
	dlWifiProxy = netip.MustParseAddr("10.51.2.2")
)

// subflowsIn lists the MPTCP subflows of a namespace.
func subflowsIn(t *testing.T, ns netns.NsHandle) []mptcppm.Subflow {
	t.Helper()
	var out []mptcppm.Subflow
	if err := nstest.In(ns, func() error {
		d, err := mptcppm.DialDiag()
		if err != nil {
			return err
		}
		defer d.Close()
		out, err = d.Subflows()
		return err
	}); err != nil {
		t.Fatalf("subflows: %v", err)
	}
	return out
}

// waitSubflows polls ns until ok holds for its subflows.
func waitSubflows(t *testing.T, ns netns.NsHandle, what string, ok func([]mptcppm.Subflow) bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		sfs := subflowsIn(t, ns)
		if ok(sfs) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: subflows %+v", what, sfs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// flagged reports, per remote (or, at the CPE, local) address of the
// connection with the given local port, whether flag is set.
func byAddr(sfs []mptcppm.Subflow, cpeSide bool, flag mptcppm.SubflowFlags) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, s := range sfs {
		a := s.Remote.Addr()
		if cpeSide {
			a = s.Local.Addr()
		}
		out[a] = out[a] || s.Flags&flag != 0
	}
	return out
}

// TestDownlinkInNetns drives the Downlink against the real kernel: a proxy
// namespace on the userspace path manager, a CPE namespace whose in-kernel
// path manager joins a wifi subflow to the proxy's nr address, and MPTCP
// connections between them. It checks the flags on both ends (the CPE sees
// the proxy's MP_PRIO), new connections flagged by Watch, clearing on
// weight 1 and when the CPE is no longer served. (That the proxy refuses
// joins without an event listener is not asserted here: the kernel counts
// listeners host-wide, so any other test's listener would satisfy it.)
func TestDownlinkInNetns(t *testing.T) {
	p := nstest.NewPair(t, []nstest.Link{
		{Name: "nr0", AAddr: netip.PrefixFrom(dlNrCPE, 24), BAddr: netip.PrefixFrom(dlNrProxy, 24)},
		{Name: "wifi0", AAddr: netip.PrefixFrom(dlWifiCPE, 24), BAddr: netip.PrefixFrom(dlWifiProxy, 24)},
	})
	cpe, proxy := p.A, p.B
	if err := nstest.In(cpe, func() error {
		pm, err := mptcppm.Dial()
		if err != nil {
			return err
		}
		defer pm.Close()
		if err := pm.SetLimits(mptcppm.Limits{Subflows: 4, AddAddrAccepted: 4}); err != nil {
			return err
		}
		l, err := net.InterfaceByName("wifi0")
		if err != nil {
			return err
		}
		return pm.Add(mptcppm.Endpoint{Addr: dlWifiCPE, Flags: mptcppm.FlagSubflow, IfIndex: int32(l.Index)})
	}); err != nil {
		t.Fatalf("CPE path manager: %v", err)
	}
	if err := nstest.In(proxy, func() error { return EnsureUserspacePM("") }); err != nil {
		t.Fatal(err)
	}
	// Idempotent: a second call reads the value back and leaves it.
	if err := nstest.In(proxy, func() error { return EnsureUserspacePM("") }); err != nil {
		t.Fatal(err)
	}

	var ln net.Listener
	if err := nstest.In(proxy, func() error {
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		var err error
		ln, err = lc.Listen(context.Background(), "tcp4", netip.AddrPortFrom(dlNrProxy, 5301).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var accepted sync.WaitGroup
	defer func() { ln.Close(); accepted.Wait() }()
	accepted.Add(1)
	go func() {
		defer accepted.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			// Data both ways makes the connection fully established at
			// both ends, which is when the CPE's path manager joins.
			c.Write([]byte{1})
		}
	}()
	dial := func() net.Conn {
		t.Helper()
		var c net.Conn
		if err := nstest.In(cpe, func() error {
			var d net.Dialer
			d.SetMultipathTCP(true)
			var err error
			c, err = d.Dial("tcp4", netip.AddrPortFrom(dlNrProxy, 5301).String())
			if err != nil {
				return err
			}
			if _, err := c.Write([]byte{1}); err != nil {
				return err
			}
			_, err = c.Read(make([]byte, 1))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	countTo := func(sfs []mptcppm.Subflow, a netip.Addr) int {
		n := 0
		for _, s := range sfs {
			if s.Remote.Addr() == a {
				n++
			}
		}
		return n
	}

	var dl *Downlink
	if err := nstest.In(proxy, func() error {
		var err error
		dl, err = DialDownlink(nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	if c := dl.Capabilities(); !c.OnOffOnly || !c.DirectionsCoupled || c.MaxWeight != 1 {
		t.Fatalf("capabilities %+v", c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	watchDone := make(chan error, 1)
	go func() { watchDone <- dl.Watch(ctx, func() {}) }()
	defer func() {
		cancel()
		if err := <-watchDone; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()

	dial()
	waitSubflows(t, proxy, "join accepted with the listener", func(sfs []mptcppm.Subflow) bool {
		return countTo(sfs, dlWifiCPE) == 1
	})

	apply := func(wifi int, served bool) {
		t.Helper()
		var cpes []backend.Device
		if served {
			cpes = []backend.Device{{CPEID: "cpe-0001", Paths: []backend.Path{
				{WAT: "nr", Addr: dlNrCPE, Weight: 1}, {WAT: "wifi", Addr: dlWifiCPE, Weight: wifi}, {WAT: "lifi"},
			}}}
		}
		notApplied, err := dl.ApplyAll(context.Background(), cpes)
		if err != nil || len(notApplied) != 0 {
			t.Fatalf("ApplyAll(wifi=%d, served=%t) = %v, %v", wifi, served, notApplied, err)
		}
	}
	// check waits until the proxy's own flag and the CPE's view of it
	// (MP_PRIO received) match wifiOff on every connection.
	check := func(what string, wifiOff bool, conns int) {
		t.Helper()
		waitSubflows(t, proxy, what+" (proxy)", func(sfs []mptcppm.Subflow) bool {
			return countTo(sfs, dlWifiCPE) == conns && byAddr(sfs, false, mptcppm.SubflowBackupLocal)[dlWifiCPE] == wifiOff &&
				!byAddr(sfs, false, mptcppm.SubflowBackupLocal)[dlNrCPE] && allFlagged(sfs, dlWifiCPE, mptcppm.SubflowBackupLocal, wifiOff)
		})
		waitSubflows(t, cpe, what+" (CPE)", func(sfs []mptcppm.Subflow) bool {
			var mine []mptcppm.Subflow
			for _, s := range sfs {
				mine = append(mine, mptcppm.Subflow{Remote: s.Local, Flags: s.Flags})
			}
			return allFlagged(mine, dlWifiCPE, mptcppm.SubflowBackupRemote, wifiOff) && !byAddr(sfs, true, mptcppm.SubflowBackupRemote)[dlNrCPE]
		})
	}

	apply(0, true)
	check("wifi=0 on a running connection", true, 1)
	// A connection opened now is flagged by Watch from its events.
	dial()
	check("wifi=0 on a new connection", true, 2)
	apply(1, true)
	check("wifi=1", false, 2)
	apply(0, true)
	check("wifi=0 again", true, 2)
	apply(0, false)
	check("CPE no longer served", false, 2)

	// Two CPEs reporting one address cannot be told apart: the later id
	// is not applied, the earlier one is.
	notApplied, err := dl.ApplyAll(context.Background(), []backend.Device{
		{CPEID: "cpe-0002", Paths: []backend.Path{{WAT: "wifi", Addr: dlWifiCPE, Weight: 1}}},
		{CPEID: "cpe-0001", Paths: []backend.Path{{WAT: "nr", Addr: dlNrCPE, Weight: 1}, {WAT: "wifi", Addr: dlWifiCPE, Weight: 0}}},
	})
	if err != nil || len(notApplied) != 1 || notApplied["cpe-0002"] == nil {
		t.Fatalf("ApplyAll with a shared address = %v, %v", notApplied, err)
	}
	check("shared address: the earlier CPE's weights", true, 2)
	t.Logf("cpe-0002 not applied: %v", notApplied["cpe-0002"])
}

// allFlagged tells whether every subflow to a has flag set (want) or none
// has (!want).
func allFlagged(sfs []mptcppm.Subflow, a netip.Addr, flag mptcppm.SubflowFlags, want bool) bool {
	for _, s := range sfs {
		if s.Remote.Addr() == a && (s.Flags&flag != 0) != want {
			return false
		}
	}
	return true
}
