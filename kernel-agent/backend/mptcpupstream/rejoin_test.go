package mptcpupstream

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
)

func (f *fakeSubflows) Close() error { return nil }

var (
	t0        = time.Unix(1763800000, 0)
	proxyPort = netip.MustParseAddrPort("10.32.0.2:5301")
	otherAddr = netip.MustParseAddr("10.99.0.1")
	// wifiEp is wifi's endpoint as the operator configured it.
	wifiEp = mptcppm.Endpoint{ID: 7, Addr: wifiAddr, Flags: mptcppm.FlagSubflow | mptcppm.FlagSignal, IfIndex: 4}
	nrEp   = mptcppm.Endpoint{ID: 1, Addr: nrAddr, Flags: mptcppm.FlagSubflow, IfIndex: 3}
)

func on(token uint32, local netip.Addr) mptcppm.Subflow {
	return mptcppm.Subflow{Token: token, Local: netip.AddrPortFrom(local, 40000+uint16(token)), Remote: proxyPort}
}

func wifiPaths(down bool) []backend.Path {
	return []backend.Path{
		{WAT: "nr", Addr: nrAddr, Index: 3, Weight: 5},
		{WAT: "wifi", Addr: wifiAddr, Index: 4, Weight: 1, Down: down},
	}
}

// returned is a backend whose wifi link was lost (its endpoint removed)
// and came back (the endpoint added again); the calls so far forgotten.
func returned(t *testing.T) (*Backend, *fakePM, *fakeSubflows) {
	t.Helper()
	pm := &fakePM{eps: []mptcppm.Endpoint{nrEp, wifiEp}}
	sf := &fakeSubflows{}
	b := New(pm, sf)
	for _, down := range []bool{true, false} {
		if err := b.Apply(context.Background(), wifiPaths(down)); err != nil {
			t.Fatal(err)
		}
	}
	pm.calls = nil
	return b, pm, sf
}

// rejoinStep is one Rejoin call, at t0+at, with the kernel's subflows
// then; next is the time it should ask to be called again, after t0 (0:
// nothing left to check).
type rejoinStep struct {
	at        time.Duration
	subs      []mptcppm.Subflow
	listErr   error
	wantCalls []string
	readded   []string
	gaveUp    []string
	wantErr   bool
	next      time.Duration
}

func runSteps(t *testing.T, b *Backend, pm *fakePM, sf *fakeSubflows, steps []rejoinStep) {
	t.Helper()
	for i, st := range steps {
		pm.calls = nil
		sf.sfs, sf.listErr = st.subs, st.listErr
		rep, err := b.Rejoin(context.Background(), t0.Add(st.at))
		if (err != nil) != st.wantErr {
			t.Fatalf("step %d (%v): err %v, want error %v", i, st.at, err, st.wantErr)
		}
		if diff := cmp.Diff(st.wantCalls, pm.calls); diff != "" {
			t.Errorf("step %d (%v): calls (-want +got):\n%s", i, st.at, diff)
		}
		var next time.Time
		if st.next > 0 {
			next = t0.Add(st.next)
		}
		want := backend.RejoinReport{Readded: st.readded, GaveUp: st.gaveUp, Next: next}
		if diff := cmp.Diff(want, rep); diff != "" {
			t.Errorf("step %d (%v): report (-want +got):\n%s", i, st.at, diff)
		}
	}
}

var readd = []string{"list", "delete 10.31.2.1", "add 10.31.2.1 signal subflow"}

// TestRejoin: the path manager tries a returned endpoint's subflows once;
// the backend looks 0.5 s later and, while connections run on nr and none
// on wifi, removes and adds wifi's endpoint again (its id, flags and
// interface), at most four times with doubling waits. A subflow on wifi,
// or no connection to rejoin, ends the checks; a working subflow is never
// closed.
func TestRejoin(t *testing.T) {
	first := rejoinStep{at: 0, next: 500 * time.Millisecond}
	tests := []struct {
		name  string
		steps []rejoinStep
	}{
		{
			name: "joined by the first check: nothing touched",
			steps: []rejoinStep{first,
				{at: 500 * time.Millisecond, subs: []mptcppm.Subflow{on(1, nrAddr), on(1, wifiAddr)}, wantCalls: []string{"list"}}},
		},
		{
			name: "the join failed: re-added, then joined",
			steps: []rejoinStep{first,
				{at: 500 * time.Millisecond, subs: []mptcppm.Subflow{on(1, nrAddr)}, wantCalls: readd, readded: []string{"wifi"}, next: 1500 * time.Millisecond},
				{at: 1500 * time.Millisecond, subs: []mptcppm.Subflow{on(1, nrAddr), on(1, wifiAddr)}, wantCalls: []string{"list"}}},
		},
		{
			name: "never joined: four re-adds, then left as it is",
			steps: []rejoinStep{first,
				{at: 500 * time.Millisecond, subs: []mptcppm.Subflow{on(1, nrAddr)}, wantCalls: readd, readded: []string{"wifi"}, next: 1500 * time.Millisecond},
				{at: 1500 * time.Millisecond, subs: []mptcppm.Subflow{on(1, nrAddr)}, wantCalls: readd, readded: []string{"wifi"}, next: 3500 * time.Millisecond},
				{at: 3500 * time.Millisecond, subs: []mptcppm.Subflow{on(1, nrAddr)}, wantCalls: readd, readded: []string{"wifi"}, next: 7500 * time.Millisecond},
				{at: 7500 * time.Millisecond, subs: []mptcppm.Subflow{on(1, nrAddr)}, wantCalls: readd, readded: []string{"wifi"}, next: 15500 * time.Millisecond},
				{at: 15500 * time.Millisecond, subs: []mptcppm.Subflow{on(1, nrAddr)}, wantCalls: []string{"list"}, gaveUp: []string{"wifi"}},
				{at: 20 * time.Second, subs: []mptcppm.Subflow{on(1, nrAddr)}}},
		},
		{
			name: "one connection has its subflow, another not: never churned",
			steps: []rejoinStep{first,
				{at: 500 * time.Millisecond, subs: []mptcppm.Subflow{on(1, nrAddr), on(1, wifiAddr), on(2, nrAddr)}, wantCalls: []string{"list"}}},
		},
		{
			name: "no connection: nothing to rejoin",
			steps: []rejoinStep{first,
				{at: 500 * time.Millisecond, wantCalls: []string{"list"}}},
		},
		{
			name: "connections on other addresses only: nothing to rejoin",
			steps: []rejoinStep{first,
				{at: 500 * time.Millisecond, subs: []mptcppm.Subflow{on(1, otherAddr)}, wantCalls: []string{"list"}}},
		},
		{
			name: "not due yet: nothing read",
			steps: []rejoinStep{first,
				{at: 400 * time.Millisecond, next: 500 * time.Millisecond}},
		},
		{
			name: "sock_diag fails: counted as a try, nothing removed",
			steps: []rejoinStep{first,
				{at: 500 * time.Millisecond, listErr: errors.New("EPERM"), wantErr: true, next: 1500 * time.Millisecond},
				{at: 1500 * time.Millisecond, subs: []mptcppm.Subflow{on(1, nrAddr)}, wantCalls: readd, readded: []string{"wifi"}, next: 3500 * time.Millisecond}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, pm, sf := returned(t)
			runSteps(t, b, pm, sf, tt.steps)
			if diff := cmp.Diff([]mptcppm.Endpoint{nrEp, wifiEp}, pm.eps, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRejoinAndApply: a link lost again ends its checks; a re-add whose
// add fails leaves the endpoint to the next Apply, which puts it back as
// it was and checks it again; an endpoint Apply creates is checked alike.
func TestRejoinAndApply(t *testing.T) {
	ctx := context.Background()
	t.Run("lost again before the check", func(t *testing.T) {
		b, pm, sf := returned(t)
		runSteps(t, b, pm, sf, []rejoinStep{{at: 0, next: 500 * time.Millisecond}})
		if err := b.Apply(ctx, wifiPaths(true)); err != nil {
			t.Fatal(err)
		}
		runSteps(t, b, pm, sf, []rejoinStep{{at: 500 * time.Millisecond, subs: []mptcppm.Subflow{on(1, nrAddr)}}})
	})
	t.Run("the re-add's add fails", func(t *testing.T) {
		b, pm, sf := returned(t)
		runSteps(t, b, pm, sf, []rejoinStep{{at: 0, next: 500 * time.Millisecond}})
		pm.failAdd = errors.New("ENOMEM")
		runSteps(t, b, pm, sf, []rejoinStep{{at: 500 * time.Millisecond, subs: []mptcppm.Subflow{on(1, nrAddr)}, wantCalls: readd, wantErr: true, next: 1500 * time.Millisecond}})
		pm.failAdd, pm.calls = nil, nil
		if err := b.Apply(ctx, wifiPaths(false)); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"list", "add 10.31.2.1 signal subflow", "list"}, pm.calls); diff != "" {
			t.Errorf("Apply after the failed add: calls (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]mptcppm.Endpoint{nrEp, wifiEp}, pm.eps, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("endpoints (-want +got):\n%s", diff)
		}
		runSteps(t, b, pm, sf, []rejoinStep{
			{at: time.Second, next: 1500 * time.Millisecond},
			{at: 1500 * time.Millisecond, subs: []mptcppm.Subflow{on(1, nrAddr), on(1, wifiAddr)}, wantCalls: []string{"list"}},
		})
	})
	t.Run("created by Apply", func(t *testing.T) {
		pm, sf := &fakePM{}, &fakeSubflows{}
		b := New(pm, sf)
		if err := b.Apply(ctx, wifiPaths(false)); err != nil {
			t.Fatal(err)
		}
		runSteps(t, b, pm, sf, []rejoinStep{
			{at: 0, next: 500 * time.Millisecond},
			{at: 500 * time.Millisecond, subs: []mptcppm.Subflow{on(1, nrAddr)}, wantCalls: []string{"list", "delete 10.31.2.1", "add 10.31.2.1 subflow"}, readded: []string{"wifi"}, next: 1500 * time.Millisecond},
		})
	})
}
