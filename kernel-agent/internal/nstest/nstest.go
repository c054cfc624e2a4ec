//go:build linux

// Package nstest runs test code inside fresh network namespaces, and skips
// tests with a clear reason where namespaces cannot be made (not root, no
// CAP_SYS_ADMIN, a container without unshare).
package nstest

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Do runs fn on a thread inside a new, empty network namespace and
// returns when fn returns. Sockets fn opens stay in that namespace. The
// namespace disappears when its last socket and thread are gone.
func Do(t testing.TB, fn func(ns netns.NsHandle)) {
	t.Helper()
	done := make(chan struct{})
	var skip string
	go func() {
		defer close(done)
		// The thread is locked and never unlocked on error paths: the
		// runtime then ends it instead of reusing a thread in a foreign
		// namespace.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			skip = "cannot read the current network namespace: " + err.Error()
			return
		}
		defer orig.Close()
		ns, err := netns.New()
		if err != nil {
			skip = "cannot create a network namespace (needs root/CAP_SYS_ADMIN): " + err.Error()
			return
		}
		defer ns.Close()
		fn(ns)
		if err := netns.Set(orig); err == nil {
			runtime.UnlockOSThread()
		}
	}()
	<-done
	if skip != "" {
		t.Skip(skip)
	}
}

// In runs fn on a thread switched into ns, then switches back.
func In(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// ServeDiscard accepts connections on ln until ln is closed and reads each
// one to its end: the receiving side of a bulk transfer in a test. It
// returns when Accept fails, so run it in its own goroutine.
func ServeDiscard(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			_, _ = io.Copy(io.Discard, c)
			_ = c.Close()
		}()
	}
}

// Link is one veth path of a Pair: Name in namespace A (with address
// AAddr), "p"+Name in namespace B (with BAddr), both in one subnet.
type Link struct {
	Name         string
	AAddr, BAddr netip.Prefix
}

// Pair is two fresh network namespaces joined by veth links, with MPTCP
// enabled and reverse-path filtering off in both. A has source routing:
// traffic from a link's A address leaves by that link, so subflows from
// each address take their own path whatever B address they go to.
type Pair struct {
	A, B netns.NsHandle
}

// NewPair creates the namespaces and links; they are removed when the test
// ends (the handles close, and with them the last reference). It skips
// where namespaces cannot be made.
func NewPair(t testing.TB, links []Link) *Pair {
	t.Helper()
	p := &Pair{}
	var skip string
	done := make(chan error, 1)
	go func() {
		// Created on a locked thread that is not handed back to the
		// runtime on failure (see Do).
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			skip = "cannot read the current network namespace: " + err.Error()
			done <- nil
			return
		}
		defer orig.Close()
		if p.A, err = netns.New(); err != nil {
			skip = "cannot create a network namespace (needs root/CAP_SYS_ADMIN): " + err.Error()
			done <- nil
			return
		}
		if p.B, err = netns.New(); err != nil {
			p.A.Close()
			skip = "cannot create a network namespace: " + err.Error()
			done <- nil
			return
		}
		if err := netns.Set(orig); err == nil {
			runtime.UnlockOSThread()
		}
		done <- nil
	}()
	<-done
	if skip != "" {
		t.Skip(skip)
	}
	t.Cleanup(func() { p.A.Close(); p.B.Close() })
	if err := p.setup(links); err != nil {
		t.Fatalf("nstest pair: %v", err)
	}
	return p
}

func (p *Pair) setup(links []Link) error {
	ha, err := vnl.NewHandleAt(p.A)
	if err != nil {
		return err
	}
	defer ha.Close()
	hb, err := vnl.NewHandleAt(p.B)
	if err != nil {
		return err
	}
	defer hb.Close()
	for _, h := range []*vnl.Handle{ha, hb} {
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := h.LinkSetUp(lo); err != nil {
			return err
		}
	}
	for _, ns := range []netns.NsHandle{p.A, p.B} {
		if err := In(ns, func() error {
			return WriteSysctls(map[string]string{
				"net/mptcp/enabled": "1", "net/ipv4/conf/all/rp_filter": "0", "net/ipv4/conf/default/rp_filter": "0",
			})
		}); err != nil {
			return err
		}
	}
	for i, l := range links {
		peer := "p" + l.Name
		veth := &vnl.Veth{LinkAttrs: vnl.LinkAttrs{Name: l.Name}, PeerName: peer, PeerNamespace: vnl.NsFd(p.B)}
		if err := ha.LinkAdd(veth); err != nil {
			return fmt.Errorf("add %s: %w", l.Name, err)
		}
		la, err := ha.LinkByName(l.Name)
		if err != nil {
			return err
		}
		lb, err := hb.LinkByName(peer)
		if err != nil {
			return err
		}
		if err := ha.AddrAdd(la, &vnl.Addr{IPNet: ipNet(l.AAddr)}); err != nil {
			return err
		}
		if err := hb.AddrAdd(lb, &vnl.Addr{IPNet: ipNet(l.BAddr)}); err != nil {
			return err
		}
		if err := ha.LinkSetUp(la); err != nil {
			return err
		}
		if err := hb.LinkSetUp(lb); err != nil {
			return err
		}
		table := 100 + i
		rule := vnl.NewRule()
		rule.Src = &net.IPNet{IP: l.AAddr.Addr().AsSlice(), Mask: net.CIDRMask(l.AAddr.Addr().BitLen(), l.AAddr.Addr().BitLen())}
		rule.Table = table
		if err := ha.RuleAdd(rule); err != nil {
			return fmt.Errorf("rule for %s: %w", l.Name, err)
		}
		gw := l.BAddr.Addr().AsSlice()
		if err := ha.RouteAdd(&vnl.Route{LinkIndex: la.Attrs().Index, Gw: gw, Table: table}); err != nil {
			return fmt.Errorf("route for %s: %w", l.Name, err)
		}
		if err := In(p.A, func() error {
			return WriteSysctls(map[string]string{"net/ipv4/conf/" + l.Name + "/rp_filter": "0"})
		}); err != nil {
			return err
		}
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// WriteSysctls writes sysctl files (paths under /proc/sys) in the calling
// thread's network namespace, for use inside In.
func WriteSysctls(kv map[string]string) error {
	for k, v := range kv {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0); err != nil {
			return err
		}
	}
	return nil
}
