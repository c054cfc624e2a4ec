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
	ignore  bool // accept SetFlags but change nothing (a kernel bug)
}

func (f *fakePM) Endpoints() ([]mptcppm.Endpoint, error) {
	f.calls = append(f.calls, "list")
	return append([]mptcppm.Endpoint(nil), f.eps...), nil
}

func (f *fakePM) Add(e mptcppm.Endpoint) error {
	f.calls = append(f.calls, "add "+e.Addr.String()+" "+e.Flags.String())
	e.ID = uint8(len(f.eps) + 1)
	f.eps = append(f.eps, e)
	return nil
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
			b := New(pm)
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

func TestApplyErrors(t *testing.T) {
	eps := []mptcppm.Endpoint{{ID: 1, Addr: nrAddr, Flags: mptcppm.FlagSubflow}}
	paths := []backend.Path{{WAT: "nr", Addr: nrAddr, Weight: 0}}
	boom := errors.New("boom")
	if err := New(&fakePM{eps: eps, failSet: boom}).Apply(context.Background(), paths); !errors.Is(err, boom) {
		t.Errorf("SetFlags failure: Apply = %v", err)
	}
	if err := New(&fakePM{eps: eps, ignore: true}).Apply(context.Background(), paths); err == nil {
		t.Error("unverified flags: Apply succeeded")
	}
	if c := New(&fakePM{}).Capabilities(); !c.OnOffOnly || c.MaxWeight != 1 {
		t.Errorf("Capabilities = %+v", c)
	}
}
