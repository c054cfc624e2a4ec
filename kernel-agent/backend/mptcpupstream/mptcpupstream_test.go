package mptcpupstream

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
)

// fakePM is an in-memory path manager with the kernel's semantics for the
// three operations the backend uses.
type fakePM struct {
	eps     []mptcppm.Endpoint
	calls   []string
	failSet error
	failAdd error
	ignore  bool // accept SetFlags but change nothing (a kernel bug)
}

func (f *fakePM) Endpoints() ([]mptcppm.Endpoint, error) {
	f.calls = append(f.calls, "list")
	return append([]mptcppm.Endpoint(nil), f.eps...), nil
}

func (f *fakePM) Add(e mptcppm.Endpoint) error {
	f.calls = append(f.calls, "add "+e.Addr.String()+" "+e.Flags.String())
	if f.failAdd != nil {
		return f.failAdd
	}
	if e.ID == 0 { // the kernel picks a free id
		e.ID = uint8(len(f.eps) + 1)
	}
	f.eps = append(f.eps, e)
	return nil
}

func (f *fakePM) Delete(e mptcppm.Endpoint) error {
	f.calls = append(f.calls, "delete "+e.Addr.String())
	for i := range f.eps {
		if f.eps[i].ID == e.ID {
			f.eps = append(f.eps[:i], f.eps[i+1:]...)
			return nil
		}
	}
	return errors.New("no such endpoint")
}

func (f *fakePM) SetFlags(e mptcppm.Endpoint) error {
	f.calls = append(f.calls, "set "+e.Addr.String()+" "+e.Flags.String())
	if f.failSet != nil {
		return f.failSet
	}
	for i := range f.eps {
		if f.eps[i].Addr == e.Addr && !f.ignore {
			f.eps[i].Flags = e.Flags
		}
	}
	return nil
}

func (f *fakePM) Close() error { return nil }

var (
	nrAddr   = netip.MustParseAddr("10.31.1.1")
	wifiAddr = netip.MustParseAddr("10.31.2.1")
)

func TestApply(t *testing.T) {
	tests := []struct {
		name      string
		eps       []mptcppm.Endpoint
		weights   [2]int
		wantCalls []string
		wantFlags map[netip.Addr]mptcppm.Flags
	}{
		{
			name:      "creates missing endpoints",
			weights:   [2]int{0, 5},
			wantCalls: []string{"list", "add 10.31.1.1 subflow backup", "add 10.31.2.1 subflow", "list"},
			wantFlags: map[netip.Addr]mptcppm.Flags{nrAddr: mptcppm.FlagSubflow | mptcppm.FlagBackup, wifiAddr: mptcppm.FlagSubflow},
		},
		{
			name: "flips backup, keeps other flags",
			eps: []mptcppm.Endpoint{
				{ID: 1, Addr: nrAddr, Flags: mptcppm.FlagSubflow | mptcppm.FlagSignal},
				{ID: 2, Addr: wifiAddr, Flags: mptcppm.FlagSubflow | mptcppm.FlagBackup},
			},
			weights:   [2]int{0, 1},
			wantCalls: []string{"list", "set 10.31.1.1 signal subflow backup", "set 10.31.2.1 subflow", "list"},
			wantFlags: map[netip.Addr]mptcppm.Flags{nrAddr: mptcppm.FlagSubflow | mptcppm.FlagSignal | mptcppm.FlagBackup, wifiAddr: mptcppm.FlagSubflow},
		},
		{
			name: "nothing to change: one list, no verify",
			eps: []mptcppm.Endpoint{
				{ID: 1, Addr: nrAddr, Flags: mptcppm.FlagSubflow},
				{ID: 2, Addr: wifiAddr, Flags: mptcppm.FlagSubflow},
			},
			weights:   [2]int{30, 100},
			wantCalls: []string{"list"},
			wantFlags: map[netip.Addr]mptcppm.Flags{nrAddr: mptcppm.FlagSubflow, wifiAddr: mptcppm.FlagSubflow},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pm := &fakePM{eps: tt.eps}
			b := New(pm, &fakeSubflows{})
			err := b.Apply(context.Background(), []backend.Path{
				{WAT: "nr", Addr: nrAddr, Weight: tt.weights[0], Index: 3},
				{WAT: "wifi", Addr: wifiAddr, Weight: tt.weights[1], Index: 4},
				{WAT: "lifi", Weight: 0}, // no address: skipped
			})
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if diff := cmp.Diff(tt.wantCalls, pm.calls); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			got := map[netip.Addr]mptcppm.Flags{}
			for _, e := range pm.eps {
				got[e.Addr] = e.Flags
			}
			if diff := cmp.Diff(tt.wantFlags, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("flags (-want +got):\n%s", diff)
			}
		})
	}
}

// A lost link's endpoint is removed (its subflows close, their data goes
// out on the others at once) and comes back as it was when the link does.
func TestApplyLostLink(t *testing.T) {
	pm := &fakePM{eps: []mptcppm.Endpoint{
		{ID: 1, Addr: nrAddr, Flags: mptcppm.FlagSubflow, IfIndex: 3},
		{ID: 7, Addr: wifiAddr, Flags: mptcppm.FlagSubflow | mptcppm.FlagSignal, IfIndex: 4},
	}}
	b := New(pm, &fakeSubflows{})
	steps := []struct {
		name      string
		wifi      backend.Path
		wantCalls []string
		want      []mptcppm.Endpoint
	}{
		{
			name:      "link lost: removed",
			wifi:      backend.Path{WAT: "wifi", Addr: wifiAddr, Index: 4, Down: true},
			wantCalls: []string{"list", "delete 10.31.2.1", "list"},
			want:      []mptcppm.Endpoint{{ID: 1, Addr: nrAddr, Flags: mptcppm.FlagSubflow, IfIndex: 3}},
		},
		{
			name:      "still lost: nothing to do",
			wifi:      backend.Path{WAT: "wifi", Addr: wifiAddr, Index: 4, Down: true},
			wantCalls: []string{"list"},
			want:      []mptcppm.Endpoint{{ID: 1, Addr: nrAddr, Flags: mptcppm.FlagSubflow, IfIndex: 3}},
		},
		{
			name:      "back at weight 0: its id, flags and interface, flagged backup",
			wifi:      backend.Path{WAT: "wifi", Addr: wifiAddr, Index: 4},
			wantCalls: []string{"list", "add 10.31.2.1 signal subflow backup", "list"},
			want: []mptcppm.Endpoint{
				{ID: 1, Addr: nrAddr, Flags: mptcppm.FlagSubflow, IfIndex: 3},
				{ID: 7, Addr: wifiAddr, Flags: mptcppm.FlagSubflow | mptcppm.FlagSignal | mptcppm.FlagBackup, IfIndex: 4},
			},
		},
	}
	for _, st := range steps {
		pm.calls = nil
		nr := backend.Path{WAT: "nr", Addr: nrAddr, Index: 3, Weight: 5}
		if err := b.Apply(context.Background(), []backend.Path{nr, st.wifi}); err != nil {
			t.Fatalf("%s: Apply: %v", st.name, err)
		}
		if diff := cmp.Diff(st.wantCalls, pm.calls); diff != "" {
			t.Errorf("%s: calls (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff(st.want, pm.eps, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("%s: endpoints (-want +got):\n%s", st.name, diff)
		}
	}
}

func TestApplyErrors(t *testing.T) {
	eps := []mptcppm.Endpoint{{ID: 1, Addr: nrAddr, Flags: mptcppm.FlagSubflow}}
	paths := []backend.Path{{WAT: "nr", Addr: nrAddr, Weight: 0}}
	boom := errors.New("boom")
	if err := New(&fakePM{eps: eps, failSet: boom}, &fakeSubflows{}).Apply(context.Background(), paths); !errors.Is(err, boom) {
		t.Errorf("SetFlags failure: Apply = %v", err)
	}
	if err := New(&fakePM{eps: eps, ignore: true}, &fakeSubflows{}).Apply(context.Background(), paths); err == nil {
		t.Error("unverified flags: Apply succeeded")
	}
	if c := New(&fakePM{}, &fakeSubflows{}).Capabilities(); !c.OnOffOnly || c.MaxWeight != 1 {
		t.Errorf("Capabilities = %+v", c)
	}
}
