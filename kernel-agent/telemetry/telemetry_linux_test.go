//go:build linux

package telemetry

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/mcw-xapp/kernel-agent/internal/nstest"
	"github.com/mcw-xapp/kernel-agent/payload"
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
		go nstest.ServeDiscard(ln)
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
		go nstest.ServeDiscard(ln)
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

// TestSaturationInNetns runs two MPTCP connections through one tbf
// bottleneck on the loopback of a private namespace: a bulk sender from
// 127.0.0.1 ("nr"), which the bottleneck limits, and a sender from
// 127.0.0.2 ("wifi") that writes 1 kB every 10 ms, far below the rate.
// The trickle shares the bottleneck's queue, so it always has a packet in
// flight and the kernel counts it busy the whole time: the case where the
// chrono times alone would call a censored subflow saturated.
func TestSaturationInNetns(t *testing.T) {
	if _, err := exec.LookPath("tc"); err != nil {
		t.Skip("needs tc (iproute2) for the tbf bottleneck")
	}
	nstest.Do(t, func(netns.NsHandle) {
		lo, _ := netlink.LinkByName("lo")
		if err := netlink.LinkSetUp(lo); err != nil {
			t.Fatal(err)
		}
		// Ethernet-sized packets: tbf drops any packet larger than its burst.
		if err := netlink.LinkSetMTU(lo, 1500); err != nil {
			t.Fatal(err)
		}
		// The child inherits the namespace of this locked thread.
		if out, err := exec.Command("tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "20mbit", "burst", "32kb", "latency", "50ms").CombinedOutput(); err != nil {
			t.Skipf("cannot add a tbf qdisc: %v: %s", err, out)
		}
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		ln, err := lc.Listen(t.Context(), "tcp4", "127.0.0.3:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go nstest.ServeDiscard(ln)
		dial := func(src string) net.Conn {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
			d.SetMultipathTCP(true)
			c, err := d.Dial("tcp4", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			if mp, _ := c.(*net.TCPConn).MultipathTCP(); !mp {
				c.Close()
				t.Skip("MPTCP not available in this kernel/namespace")
			}
			return c
		}
		bulk, trickle := dial("127.0.0.1"), dial("127.0.0.2")
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			for {
				select {
				case <-stop:
					return
				default:
				}
				bulk.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
				if _, err := bulk.Write(buf); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			buf := make([]byte, 1000)
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := trickle.Write(buf); err != nil {
						return
					}
				}
			}
		}()
		defer func() { close(stop); bulk.Close(); trickle.Close(); wg.Wait() }()

		conn, err := Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		wats := map[string]WATInfo{
			"nr":   {Addr: netip.MustParseAddr("127.0.0.1"), Up: true},
			"wifi": {Addr: netip.MustParseAddr("127.0.0.2"), Up: true},
		}
		a := Aggregator{MPTCPOnly: true}
		trickleBusy := map[uint64]uint64{} // cookie -> busy µs of the trickle's subflow
		sample := func() (map[string]payload.WATTelemetry, float64) {
			subs, err := conn.Subflows()
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			seconds := now.Sub(a.lastTime).Seconds()
			var busy float64
			for _, s := range subs {
				if s.MPTCP && s.Src == wats["wifi"].Addr {
					if prev, ok := trickleBusy[s.Cookie]; ok {
						busy = float64(s.BusyMicros-prev) / 1e6 / seconds
					}
					trickleBusy[s.Cookie] = s.BusyMicros
				}
			}
			return a.Sample(now, subs, wats), busy
		}
		time.Sleep(1500 * time.Millisecond) // slow start, queue built
		sample()
		var nr, wifi, busy []float64
		for range 3 {
			time.Sleep(time.Second)
			got, b := sample()
			for _, w := range []string{"nr", "wifi"} {
				if ul := got[w].UL; ul == nil || ul.Saturated == nil || ul.DeliveryRateMbps == nil || ul.DeliveredMbps <= 0 {
					t.Fatalf("%s: saturation or delivery rate missing: %+v", w, got[w])
				}
			}
			t.Logf("nr: %.2f Mbit/s saturated %.3f | wifi: %.2f Mbit/s saturated %.3f, busy %.3f of the interval",
				got["nr"].UL.DeliveredMbps, *got["nr"].UL.Saturated, got["wifi"].UL.DeliveredMbps, *got["wifi"].UL.Saturated, b)
			nr = append(nr, *got["nr"].UL.Saturated)
			wifi = append(wifi, *got["wifi"].UL.Saturated)
			busy = append(busy, b)
		}
		// The trap is real: by busy time alone the trickle looks saturated.
		if median(busy) < 0.8 {
			t.Errorf("the trickle's busy fraction is %v, expected near 1 (data always in flight behind the bulk queue)", busy)
		}
		if median(nr) < 0.8 {
			t.Errorf("the bottlenecked sender reports saturated %v, want near 1", nr)
		}
		if median(wifi) > 0.4 {
			t.Errorf("the application-limited sender reports saturated %v, want near 0", wifi)
		}
	})
}

// TestRetransmissionsInNetns runs two MPTCP senders on the loopback of a
// private namespace, each writing 16 kB every 10 ms: one from 127.0.0.1
// ("nr") over a clean path, one from 127.0.0.2 ("wifi") over a path that
// drops a tenth of its data packets at random (iptables' statistic match at
// the receiver), and reads retrans_pct of both through sock_diag: it checks
// the tcp_info offsets against the running kernel as well as the sums.
func TestRetransmissionsInNetns(t *testing.T) {
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("needs iptables for the lossy path")
	}
	nstest.Do(t, func(netns.NsHandle) {
		lo, _ := netlink.LinkByName("lo")
		if err := netlink.LinkSetUp(lo); err != nil {
			t.Fatal(err)
		}
		// Ethernet-sized segments: some 1100 a second per sender to count.
		if err := netlink.LinkSetMTU(lo, 1500); err != nil {
			t.Fatal(err)
		}
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		ln, err := lc.Listen(t.Context(), "tcp4", "127.0.0.3:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go nstest.ServeDiscard(ln)
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		// Data and pure ACKs from wifi, not its SYN: the connection is made
		// at once, and the losses are those of a path carrying data. The
		// child inherits the namespace of this locked thread.
		if out, err := exec.Command("iptables", "-A", "INPUT", "-s", "127.0.0.2", "-d", "127.0.0.3", "-p", "tcp", "--dport", port, "!", "--syn",
			"-m", "statistic", "--mode", "random", "--probability", "0.1", "-j", "DROP").CombinedOutput(); err != nil {
			t.Skipf("cannot add the dropping rule: %v: %s", err, out)
		}
		dial := func(src string) net.Conn {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
			d.SetMultipathTCP(true)
			c, err := d.Dial("tcp4", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			if mp, _ := c.(*net.TCPConn).MultipathTCP(); !mp {
				c.Close()
				t.Skip("MPTCP not available in this kernel/namespace")
			}
			return c
		}
		conns := []net.Conn{dial("127.0.0.1"), dial("127.0.0.2")}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				buf := make([]byte, 16<<10)
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
						if _, err := c.Write(buf); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
							return
						}
					}
				}
			}()
		}
		defer func() {
			close(stop)
			for _, c := range conns {
				c.Close()
			}
			wg.Wait()
		}()

		conn, err := Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		wats := map[string]WATInfo{
			"nr":   {Addr: netip.MustParseAddr("127.0.0.1"), Up: true},
			"wifi": {Addr: netip.MustParseAddr("127.0.0.2"), Up: true},
		}
		a := Aggregator{MPTCPOnly: true}
		sample := func() map[string]payload.WATTelemetry {
			subs, err := conn.Subflows()
			if err != nil {
				t.Fatal(err)
			}
			return a.Sample(time.Now(), subs, wats)
		}
		time.Sleep(500 * time.Millisecond)
		sample()
		pct := map[string][]float64{}
		for range 3 {
			time.Sleep(time.Second)
			got := sample()
			for _, w := range []string{"nr", "wifi"} {
				ul := got[w].UL
				if ul == nil || ul.RetransPct == nil {
					t.Fatalf("%s: retrans_pct missing while sending: %+v", w, got[w])
				}
				pct[w] = append(pct[w], *ul.RetransPct)
			}
			t.Logf("retrans_pct: nr %.3f%%, wifi %.3f%%", pct["nr"][len(pct["nr"])-1], pct["wifi"][len(pct["wifi"])-1])
		}
		if median(pct["nr"]) > 1 {
			t.Errorf("the clean path reports retrans_pct %v, want near 0", pct["nr"])
		}
		// About the drop rate: each lost segment is resent once, and a
		// tenth of the resent ones are lost again; pure ACKs dropped cost
		// nothing, tail loss probes are not counted.
		if m := median(pct["wifi"]); m < 3 || m > 30 {
			t.Errorf("the path dropping 10%% of its packets reports retrans_pct %v, want about 10", pct["wifi"])
		}
	})
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
