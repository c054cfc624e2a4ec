//go:build linux

package telemetry

import (
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/mcw-xapp/kernel-agent/internal/nstest"
)

// TestSubflowsInNetns opens a TCP connection on loopback in a private
// namespace and finds it, with its acked bytes, in the sock_diag dump.
func TestSubflowsInNetns(t *testing.T) {
	nstest.Do(t, func(netns.NsHandle) {
		lo, _ := netlink.LinkByName("lo")
		if err := netlink.LinkSetUp(lo); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				io.Copy(io.Discard, c)
				c.Close()
			}
		}()
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(make([]byte, 200_000)); err != nil {
			t.Fatal(err)
		}
		conn, err := Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		local := c.LocalAddr().(*net.TCPAddr)
		var found bool
		for i := 0; i < 100 && !found; i++ {
			subs, err := conn.Subflows()
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range subs {
				if s.SrcPort == uint16(local.Port) && s.Src == netip.MustParseAddr("127.0.0.1") && s.BytesAcked >= 200_000 {
					found = s.Cwnd > 0 && s.RTTMicros > 0 && !s.MPTCP && s.Cookie != 0
				}
			}
		}
		if !found {
			t.Fatal("the test connection is not in the sock_diag dump with its acked bytes")
		}
	})
}

// TestMPTCPSubflowsInNetns checks that an MPTCP connection's subflow shows
// up in the TCP dump, marked as an MPTCP subflow.
func TestMPTCPSubflowsInNetns(t *testing.T) {
	nstest.Do(t, func(netns.NsHandle) {
		lo, _ := netlink.LinkByName("lo")
		if err := netlink.LinkSetUp(lo); err != nil {
			t.Fatal(err)
		}
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		ln, err := lc.Listen(t.Context(), "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				io.Copy(io.Discard, c)
				c.Close()
			}
		}()
		var d net.Dialer
		d.SetMultipathTCP(true)
		c, err := d.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if mp, _ := c.(*net.TCPConn).MultipathTCP(); !mp {
			t.Skip("MPTCP not available in this kernel/namespace")
		}
		c.Write(make([]byte, 100_000))
		conn, err := Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		subs, err := conn.Subflows()
		if err != nil {
			t.Fatal(err)
		}
		var mptcp int
		for _, s := range subs {
			t.Logf("%+v", s)
			if s.MPTCP {
				mptcp++
			}
		}
		if mptcp < 2 { // client and server side of the initial subflow
			t.Fatalf("%d MPTCP subflows in the dump, want 2", mptcp)
		}
	})
}
