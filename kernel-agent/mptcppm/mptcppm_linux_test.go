//go:build linux

package mptcppm

import (
	"net/netip"
	"testing"

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
