//go:build linux

package mptcppm

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/mcw-xapp/kernel-agent/internal/nstest"
)

// TestEndpointsInNetns drives the real kernel path manager in a private
// namespace: limits, add, flag changes and listing.
func TestEndpointsInNetns(t *testing.T) {
	nstest.Do(t, func(netns.NsHandle) {
		c, err := Dial()
		if err != nil {
			t.Skipf("kernel without the mptcp_pm family: %v", err)
		}
		defer c.Close()

		if err := c.SetLimits(Limits{Subflows: 4, AddAddrAccepted: 3}); err != nil {
			t.Fatalf("SetLimits: %v", err)
		}
		l, err := c.Limits()
		if err != nil || l != (Limits{Subflows: 4, AddAddrAccepted: 3}) {
			t.Fatalf("Limits = %+v, %v", l, err)
		}

		lo, err := netlink.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		addr := netip.MustParseAddr("10.77.0.1")
		want := Endpoint{Addr: addr, Flags: FlagSubflow, IfIndex: int32(lo.Attrs().Index)}
		if err := c.Add(want); err != nil {
			t.Fatalf("Add: %v", err)
		}
		for _, flags := range []Flags{FlagSubflow | FlagBackup, FlagSubflow} {
			if err := c.SetFlags(Endpoint{Addr: addr, Flags: flags}); err != nil {
				t.Fatalf("SetFlags(%s): %v", flags, err)
			}
			eps, err := c.Endpoints()
			if err != nil {
				t.Fatalf("Endpoints: %v", err)
			}
			if len(eps) != 1 || eps[0].Addr != addr || eps[0].Flags != flags || eps[0].IfIndex != want.IfIndex || eps[0].ID == 0 {
				t.Fatalf("after SetFlags(%s): endpoints %+v", flags, eps)
			}
		}
		eps, _ := c.Endpoints()
		if err := c.Delete(eps[0]); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if eps, err := c.Endpoints(); err != nil || len(eps) != 0 {
			t.Fatalf("after Delete: %+v, %v", eps, err)
		}
		if err := c.SetFlags(Endpoint{Addr: addr, Flags: FlagBackup}); err == nil {
			t.Fatal("SetFlags on a missing endpoint succeeded")
		}
	})
}

func TestFlagsString(t *testing.T) {
	if got := (FlagSubflow | FlagBackup).String(); got != "subflow backup" {
		t.Fatalf("String = %q", got)
	}
}

// TestSubflowsInNetns lists a real MPTCP connection's subflows through
// sock_diag and checks that per-subflow flags are refused under the
// in-kernel path manager (they need net.mptcp.path_manager=userspace; the
// mptcpupstream downlink test covers that case).
func TestSubflowsInNetns(t *testing.T) {
	nstest.Do(t, func(netns.NsHandle) {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			t.Fatal(err)
		}
		if err := nstest.WriteSysctls(map[string]string{"net/mptcp/enabled": "1"}); err != nil {
			t.Fatal(err)
		}
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go nstest.ServeDiscard(ln)
		var d net.Dialer
		d.SetMultipathTCP(true)
		c, err := d.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		diag, err := DialDiag()
		if err != nil {
			t.Fatal(err)
		}
		defer diag.Close()
		var sfs []Subflow
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if sfs, err = diag.Subflows(); err != nil {
				t.Fatal(err)
			}
			if len(sfs) == 2 {
				break
			}
		}
		client := netip.MustParseAddrPort(c.LocalAddr().String())
		var mine *Subflow
		for i, s := range sfs {
			if s.Local == client {
				mine = &sfs[i]
			}
		}
		if len(sfs) != 2 || mine == nil || mine.Token == 0 || mine.Flags&SubflowMPCapableLocal == 0 || mine.Flags.Backup() {
			t.Fatalf("subflows %+v (client %s)", sfs, client)
		}
		pm, err := Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer pm.Close()
		if err := pm.SetSubflowBackup(mine.Token, mine.Local, mine.Remote, true); err == nil {
			t.Fatal("per-subflow backup accepted under the in-kernel path manager")
		} else {
			t.Logf("in-kernel path manager: %v", err)
		}
		mon, err := DialMonitor()
		if err != nil {
			t.Fatal(err)
		}
		defer mon.Close()
		// A new connection is announced on the events group.
		c2, err := d.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		mon.SetReadDeadline(time.Now().Add(2 * time.Second))
		evs, err := mon.Receive()
		if err != nil || len(evs) == 0 || evs[0].Type != EventCreated || evs[0].Token == 0 {
			t.Fatalf("events %+v, %v", evs, err)
		}
		t.Logf("event %s token %08x %s -> %s", evs[0].Type, evs[0].Token, evs[0].Local, evs[0].Remote)
	})
}
