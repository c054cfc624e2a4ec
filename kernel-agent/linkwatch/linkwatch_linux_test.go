//go:build linux

package linkwatch

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

// TestWatcherInNetns drives a dummy interface in a private namespace and
// checks the watcher's initial state and its change notifications.
func TestWatcherInNetns(t *testing.T) {
	nstest.Do(t, func(netns.NsHandle) {
		la := netlink.NewLinkAttrs()
		la.Name = "wat0"
		veth := &netlink.Veth{LinkAttrs: la, PeerName: "wat0p"}
		if err := netlink.LinkAdd(veth); err != nil {
			t.Fatalf("add veth: %v", err)
		}
		peer, _ := netlink.LinkByName("wat0p")
		link, _ := netlink.LinkByName("wat0")
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 44, 0, 1), Mask: net.CIDRMask(24, 32)}}
		if err := netlink.AddrAdd(link, addr); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(peer); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // let the veth reach operstate up

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w := New([]string{"wat0", "absent0"})
		initial, err := w.Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		updates := make(chan Status, 16)
		runErr := make(chan error, 1)
		go func() { runErr <- w.Run(ctx, updates, func() {}) }()
		defer func() {
			cancel()
			if err := <-runErr; err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		want := netip.MustParseAddr("10.44.0.1")
		if s := initial["wat0"]; !s.Usable() || s.Addr != want {
			t.Fatalf("initial wat0 = %+v", s)
		}
		if s := initial["absent0"]; s.Usable() || s.Index != 0 {
			t.Fatalf("initial absent0 = %+v", s)
		}
		wait := func(what string, cond func(Status) bool) time.Duration {
			t0 := time.Now()
			timeout := time.After(2 * time.Second)
			for {
				select {
				case s := <-updates:
					if s.Interface == "wat0" && cond(s) {
						return time.Since(t0)
					}
				case <-timeout:
					t.Fatalf("no %s notification", what)
				}
			}
		}
		t0 := time.Now()
		if err := netlink.LinkSetDown(link); err != nil {
			t.Fatal(err)
		}
		wait("link down", func(s Status) bool { return !s.LinkUp })
		t.Logf("link down noticed %v after the netlink call", time.Since(t0))
		netlink.LinkSetUp(link)
		wait("link up", func(s Status) bool { return s.Usable() })
		netlink.AddrDel(link, addr)
		wait("address removed", func(s Status) bool { return !s.Addr.IsValid() })
		netlink.LinkSetDown(peer)
		netlink.AddrAdd(link, addr)
		wait("address back, carrier lost", func(s Status) bool { return s.Addr == want && !s.LinkUp })
	})
}
