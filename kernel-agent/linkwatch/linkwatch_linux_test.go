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
		link, peer, addr := upVeth(t)
		time.Sleep(50 * time.Millisecond) // let the veth reach operstate up
		initial, updates, stop := watch(t, "wat0", "absent0")
		defer stop()
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

// TestWatcherAwaitsRoute: a link set down loses its policy-routing
// table's default route; set up again, it is not usable until that route
// is back (or RouteGrace has passed), and a carrier lost with the link up
// keeps the route, so its return waits for nothing.
func TestWatcherAwaitsRoute(t *testing.T) {
	nstest.Do(t, func(netns.NsHandle) {
		link, peer, _ := upVeth(t)
		route := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.IPv4(10, 44, 0, 2), Table: 101}
		if err := netlink.RouteAdd(route); err != nil {
			t.Fatalf("add route: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // let the veth reach operstate up
		initial, updates, stop := watch(t, "wat0")
		defer stop()
		if s := initial["wat0"]; !s.Usable() {
			t.Fatalf("initial wat0 = %+v", s)
		}
		// wait returns the first status that meets cond within limit,
		// failing on one that meets bad before it.
		wait := func(what string, limit time.Duration, cond, bad func(Status) bool) time.Duration {
			t0 := time.Now()
			timeout := time.After(limit)
			for {
				select {
				case s := <-updates:
					if bad != nil && bad(s) {
						t.Fatalf("%s: %+v after %v", what, s, time.Since(t0))
					}
					if cond(s) {
						return time.Since(t0)
					}
				case <-timeout:
					t.Fatalf("no %s within %v", what, limit)
				}
			}
		}
		usable := func(s Status) bool { return s.Usable() }
		never := func(Status) bool { return false }

		netlink.LinkSetDown(link)
		wait("link down", 2*time.Second, func(s Status) bool { return !s.LinkUp }, nil)
		netlink.LinkSetUp(link)
		wait("link back awaiting its route", 2*time.Second, func(s Status) bool { return s.LinkUp && s.AwaitingRoute }, usable)
		time.Sleep(300 * time.Millisecond)
		select {
		case s := <-updates:
			t.Fatalf("a status before the route was back: %+v", s)
		default:
		}
		t0 := time.Now()
		if err := netlink.RouteAdd(route); err != nil {
			t.Fatalf("add route again: %v", err)
		}
		wait("usable with its route back", time.Second, usable, nil)
		t.Logf("usable %v after the route was added", time.Since(t0))

		netlink.LinkSetDown(link)
		wait("link down", 2*time.Second, func(s Status) bool { return !s.LinkUp }, nil)
		netlink.LinkSetUp(link)
		took := wait("usable without its route after the grace", RouteGrace+time.Second, usable, never)
		if took < RouteGrace-100*time.Millisecond {
			t.Fatalf("usable %v after the link's return, before RouteGrace", took)
		}

		// Carrier lost, link up: its routes stay.
		if err := netlink.RouteAdd(route); err != nil {
			t.Fatalf("add route: %v", err)
		}
		netlink.LinkSetDown(peer)
		wait("carrier lost", 2*time.Second, func(s Status) bool { return !s.LinkUp }, nil)
		netlink.LinkSetUp(peer)
		took = wait("usable at the carrier's return", time.Second, usable, nil)
		t.Logf("usable %v after the carrier's return", took)
	})
}

// upVeth creates the veth pair wat0 (10.44.0.1/24) and wat0p in the
// calling thread's namespace and sets both up.
func upVeth(t *testing.T) (link, peer netlink.Link, addr *netlink.Addr) {
	t.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = "wat0"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "wat0p"}); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	peer, _ = netlink.LinkByName("wat0p")
	link, _ = netlink.LinkByName("wat0")
	addr = &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 44, 0, 1), Mask: net.CIDRMask(24, 32)}}
	if err := netlink.AddrAdd(link, addr); err != nil {
		t.Fatal(err)
	}
	for _, l := range []netlink.Link{peer, link} {
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	return link, peer, addr
}

// watch starts a Watcher of ifaces: its initial state, its updates, and
// the function that stops it and checks that Run ended cleanly.
func watch(t *testing.T, ifaces ...string) (map[string]Status, chan Status, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := New(ifaces)
	initial, err := w.Start(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	updates := make(chan Status, 16)
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(ctx, updates, func() {}) }()
	return initial, updates, func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}
