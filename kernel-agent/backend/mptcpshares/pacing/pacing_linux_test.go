//go:build linux

package pacing

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/mcw-xapp/kernel-agent/internal/nstest"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
)

// testCgroup makes an empty cgroup-v2 directory for the test, removed at
// its end, or skips where there is none or no right to make one.
func testCgroup(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads a BPF program and makes a cgroup")
	}
	mount, err := CgroupV2Mount()
	if err != nil {
		t.Skip(err)
	}
	dir := filepath.Join(mount, "mcw-pacing-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove cgroup: %v", err)
		}
	})
	return dir
}

// TestProgramPassesVerifier loads the program both ways it is built: the
// kernel's verifier is the judge of the hand-assembled instructions.
func TestProgramPassesVerifier(t *testing.T) {
	cg := testCgroup(t)
	for _, by := range []KeyBy{LocalAddr, RemoteAddr} {
		t.Run(map[KeyBy]string{LocalAddr: "local", RemoteAddr: "remote"}[by], func(t *testing.T) {
			p, err := Attach(context.Background(), cg, by)
			if err != nil {
				var ve *ebpf.VerifierError
				if errors.As(err, &ve) {
					t.Fatalf("verifier: %+v", ve)
				}
				t.Fatal(err)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			if err := p.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if err := p.Set(netip.MustParseAddr("10.0.0.1"), 8000); !errors.Is(err, ErrClosed) {
				t.Fatalf("Set after Close: %v, want ErrClosed", err)
			}
		})
	}
}

// TestAttachErrors: a bad key choice or cgroup is refused and leaves
// nothing loaded.
func TestAttachErrors(t *testing.T) {
	cg := testCgroup(t)
	tests := []struct {
		name, path string
		by         KeyBy
		want       string
	}{
		{"unknown key", cg, KeyBy(7), "want LocalAddr or RemoteAddr"},
		{"no such cgroup", filepath.Join(cg, "absent"), LocalAddr, "attach to cgroup"},
		{"not a cgroup", t.TempDir(), LocalAddr, "attach to cgroup"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Attach(context.Background(), tc.path, tc.by)
			if err == nil {
				p.Close()
				t.Fatal("Attach succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to mention %q", err, tc.want)
			}
		})
	}
}

// TestCapsTable: Set, Clear and Caps on the real map, bounds refused
// without a change.
func TestCapsTable(t *testing.T) {
	cg := testCgroup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := Attach(ctx, cg, LocalAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a4, a6 := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("2001:db8::1")
	steps := []struct {
		name    string
		do      func() error
		wantErr string
		want    map[netip.Addr]uint64
	}{
		{"set v4", func() error { return p.Set(a4, 8_000_000) }, "", map[netip.Addr]uint64{a4: 8_000_000}},
		{"set v6", func() error { return p.Set(a6, 1_000_000) }, "", map[netip.Addr]uint64{a4: 8_000_000, a6: 1_000_000}},
		{"v4-mapped is the v4 key", func() error { return p.Set(netip.MustParseAddr("::ffff:10.1.2.3"), 16_000_000) }, "", map[netip.Addr]uint64{a4: 16_000_000, a6: 1_000_000}},
		{"zero refused", func() error { return p.Set(a4, 0) }, "out of", map[netip.Addr]uint64{a4: 16_000_000, a6: 1_000_000}},
		{"above 32-bit bytes/s refused", func() error { return p.Set(a4, MaxBps+8) }, "out of", map[netip.Addr]uint64{a4: 16_000_000, a6: 1_000_000}},
		{"invalid address refused", func() error { return p.Set(netip.Addr{}, 8_000_000) }, "invalid address", map[netip.Addr]uint64{a4: 16_000_000, a6: 1_000_000}},
		{"clear", func() error { return p.Clear(a6) }, "", map[netip.Addr]uint64{a4: 16_000_000}},
		{"clear again", func() error { return p.Clear(a6) }, "", map[netip.Addr]uint64{a4: 16_000_000}},
		{"max", func() error { return p.Set(a6, MaxBps) }, "", map[netip.Addr]uint64{a4: 16_000_000, a6: MaxBps}},
	}
	for _, s := range steps {
		err := s.do()
		if s.wantErr == "" && err != nil || s.wantErr != "" && (err == nil || !strings.Contains(err.Error(), s.wantErr)) {
			t.Fatalf("%s: error %v, want %q", s.name, err, s.wantErr)
		}
		got, err := p.Caps()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(s.want) {
			t.Fatalf("%s: caps %v, want %v", s.name, got, s.want)
		}
		for k, v := range s.want {
			if got[k] != v {
				t.Fatalf("%s: caps %v, want %v", s.name, got, s.want)
			}
		}
	}
	// Cancelling the context detaches and closes (on a goroutine of its
	// own): the maps are gone.
	cancel()
	for deadline := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := p.Caps(); errors.Is(err, ErrClosed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("maps still readable 1 s after the context was cancelled")
		}
	}
}

// txBytes reads the bytes sent on each named interface in handle h's
// namespace.
func txBytes(t *testing.T, h *vnl.Handle, names ...string) []uint64 {
	t.Helper()
	out := make([]uint64, len(names))
	for i, n := range names {
		l, err := h.LinkByName(n)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = l.Attrs().Statistics.TxBytes
	}
	return out
}

// sendMbit returns the Mbit/s sent on each interface over d.
func sendMbit(t *testing.T, h *vnl.Handle, d time.Duration, names ...string) []float64 {
	a := txBytes(t, h, names...)
	t0 := time.Now()
	time.Sleep(d)
	b := txBytes(t, h, names...)
	el := time.Since(t0).Seconds()
	out := make([]float64, len(names))
	for i := range names {
		out[i] = float64(b[i]-a[i]) * 8 / el / 1e6
	}
	return out
}

// TestPacesMPTCPSubflows: in two namespaces joined by two 40 Mbit/s
// paths, MPTCP connections dialled from the test cgroup get a subflow per
// path; a 8 Mbit/s cap on the second path's address holds that path near
// 8 Mbit/s whether one or two subflows share it (the count follows joins
// and closes), and lifting the cap gives the path its bytes back.
func TestPacesMPTCPSubflows(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping a real-kernel throughput test")
	}
	cg := testCgroup(t)
	a1, a2 := netip.MustParsePrefix("10.66.1.1/24"), netip.MustParsePrefix("10.66.2.1/24")
	pair := nstest.NewPair(t, []nstest.Link{{Name: "pa", AAddr: a1, BAddr: netip.MustParsePrefix("10.66.1.2/24")}, {Name: "pb", AAddr: a2, BAddr: netip.MustParsePrefix("10.66.2.2/24")}})
	h, err := vnl.NewHandleAt(pair.A)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, n := range []string{"pa", "pb"} {
		l, err := h.LinkByName(n)
		if err != nil {
			t.Fatal(err)
		}
		q := &vnl.GenericQdisc{QdiscAttrs: vnl.QdiscAttrs{LinkIndex: l.Attrs().Index, Parent: vnl.HANDLE_ROOT, Handle: vnl.MakeHandle(1, 0)}, QdiscType: "tbf"}
		tbf := &vnl.Tbf{QdiscAttrs: q.QdiscAttrs, Rate: 40e6 / 8, Limit: 40e6 / 8 / 20, Buffer: 32 * 1024}
		if err := h.QdiscAdd(tbf); err != nil {
			t.Fatalf("tbf on %s: %v", n, err)
		}
	}
	// The in-kernel path manager joins a subflow from the second address.
	for _, ns := range []netns.NsHandle{pair.A, pair.B} {
		if err := nstest.In(ns, func() error {
			pm, err := mptcppm.Dial()
			if err != nil {
				return err
			}
			defer pm.Close()
			return pm.SetLimits(mptcppm.Limits{Subflows: 4, AddAddrAccepted: 4})
		}); err != nil {
			t.Fatalf("limits: %v", err)
		}
	}
	lb, err := h.LinkByName("pb")
	if err != nil {
		t.Fatal(err)
	}
	if err := nstest.In(pair.A, func() error {
		pm, err := mptcppm.Dial()
		if err != nil {
			return err
		}
		defer pm.Close()
		return pm.Add(mptcppm.Endpoint{Addr: a2.Addr(), Flags: mptcppm.FlagSubflow, IfIndex: int32(lb.Attrs().Index)})
	}); err != nil {
		t.Fatalf("endpoint: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := Attach(ctx, cg, LocalAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Set(a2.Addr(), 8_000_000); err != nil {
		t.Fatal(err)
	}

	// The receiver is outside the cgroup: only the sender's sockets count.
	var ln net.Listener
	if err := nstest.In(pair.B, func() error {
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		ln, err = lc.Listen(ctx, "tcp4", "10.66.1.2:5400")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Add(1)
	go func() { defer wg.Done(); nstest.ServeDiscard(ln) }()

	dial := func() net.Conn {
		var c net.Conn
		if err := WithProcessIn(cg, func() error {
			return nstest.In(pair.A, func() error {
				var d net.Dialer
				d.SetMultipathTCP(true)
				c, err = d.Dial("tcp4", "10.66.1.2:5400")
				return err
			})
		}); err != nil {
			t.Fatal(err)
		}
		if mp, err := c.(*net.TCPConn).MultipathTCP(); err != nil || !mp {
			t.Fatalf("not MPTCP (%v)", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			for {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
		return c
	}
	waitFlows := func(want int64) {
		t.Helper()
		var n int64
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if n, err = p.Flows(a2.Addr()); err != nil {
				t.Fatal(err)
			}
			if n == want {
				return
			}
		}
		t.Fatalf("%d flows counted on %v, want %d", n, a2.Addr(), want)
	}
	// Within the tolerance of a loaded 2-core machine: pacing is at the
	// TCP layer, so headers add about 4 % on the wire.
	near8 := func(what string, mbit float64) {
		t.Helper()
		t.Logf("%s: %.2f Mbit/s on the capped path", what, mbit)
		if mbit < 6 || mbit > 10.5 {
			t.Errorf("%s: capped path carries %.2f Mbit/s, want 8 (6-10.5)", what, mbit)
		}
	}

	c1 := dial()
	waitFlows(1)
	time.Sleep(time.Second)
	r := sendMbit(t, h, 2*time.Second, "pa", "pb")
	t.Logf("one connection: pa %.1f pb %.1f Mbit/s", r[0], r[1])
	near8("one subflow", r[1])
	if r[0] < 15 {
		t.Errorf("the uncapped path carries %.1f Mbit/s, want it to take the rest (> 15)", r[0])
	}

	c2 := dial()
	waitFlows(2)
	time.Sleep(time.Second)
	r = sendMbit(t, h, 2*time.Second, "pa", "pb")
	t.Logf("two connections: pa %.1f pb %.1f Mbit/s", r[0], r[1])
	near8("two subflows", r[1])

	c2.Close()
	waitFlows(1)
	time.Sleep(time.Second)
	r = sendMbit(t, h, 2*time.Second, "pa", "pb")
	near8("one subflow after the other closed", r[1])

	if err := p.Clear(a2.Addr()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	r = sendMbit(t, h, 2*time.Second, "pa", "pb")
	t.Logf("cap cleared: pa %.1f pb %.1f Mbit/s", r[0], r[1])
	if r[1] < 14 {
		t.Errorf("with the cap cleared the path carries %.1f Mbit/s, want more than 14", r[1])
	}
	c1.Close()
	waitFlows(0)

	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("program stats: %+v", st)
	// Two connections, a subflow per path each: four established, four
	// closed; the first subflows (on pa, uncapped) are never paced.
	if st.Established != 4 || st.Closed != 4 || st.Paced == 0 || st.Failed != 0 {
		t.Errorf("stats %+v, want 4 established, 4 closed, some paced, none failed", st)
	}
}
