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

// fakeSubflows is an in-memory kernel for the Downlink: subflows with the
// local backup flag, set as the kernel does (exact address pair).
type fakeSubflows struct {
	sfs     []mptcppm.Subflow
	listErr error
	setErr  error
	ignore  bool // accept the command but change nothing
	sets    []string
}

func (f *fakeSubflows) Subflows() ([]mptcppm.Subflow, error) {
	return append([]mptcppm.Subflow(nil), f.sfs...), f.listErr
}

func (f *fakeSubflows) SetSubflowBackup(token uint32, local, remote netip.AddrPort, backup bool) error {
	f.sets = append(f.sets, remote.String()+map[bool]string{true: " backup", false: " clear"}[backup])
	if f.setErr != nil {
		return f.setErr
	}
	for i, s := range f.sfs {
		if s.Token == token && s.Local == local && s.Remote == remote && !f.ignore {
			f.sfs[i].Flags &^= mptcppm.SubflowBackupLocal
			if backup {
				f.sfs[i].Flags |= mptcppm.SubflowBackupLocal
			}
		}
	}
	return nil
}

type noEvents struct{}

func (noEvents) SetReadDeadline(time.Time) error   { return nil }
func (noEvents) Receive() ([]mptcppm.Event, error) { return nil, errors.New("closed") }

func sf(token uint32, remote string, flags mptcppm.SubflowFlags) mptcppm.Subflow {
	return mptcppm.Subflow{Token: token, Local: netip.MustParseAddrPort("10.40.0.2:5201"), Remote: netip.MustParseAddrPort(remote), Flags: flags}
}

func cpePaths(id string, nr, wifi string, wNr, wWifi int) backend.Device {
	return backend.Device{CPEID: id, Paths: []backend.Path{
		{WAT: "nr", Addr: netip.MustParseAddr(nr), Weight: wNr}, {WAT: "wifi", Addr: netip.MustParseAddr(wifi), Weight: wWifi},
	}}
}

func TestDownlinkApplyAll(t *testing.T) {
	a1, a2 := cpePaths("cpe-a", "10.41.1.1", "10.41.2.1", 1, 0), cpePaths("cpe-b", "10.42.1.1", "10.42.2.1", 0, 1)
	tests := []struct {
		name       string
		kernel     fakeSubflows
		steps      [][]backend.Device
		wantSets   []string
		notApplied []string // CPE ids of the last step
		wantErr    bool
	}{
		{
			name:     "weight 0 flags every subflow to that address, others untouched",
			kernel:   fakeSubflows{sfs: []mptcppm.Subflow{sf(1, "10.41.1.1:1000", 0), sf(1, "10.41.2.1:1001", 0), sf(2, "10.41.2.1:1002", 0), sf(3, "10.99.0.1:1", 0)}},
			steps:    [][]backend.Device{{a1}},
			wantSets: []string{"10.41.2.1:1001 backup", "10.41.2.1:1002 backup"},
		},
		{
			name:     "already as wanted: nothing written",
			kernel:   fakeSubflows{sfs: []mptcppm.Subflow{sf(1, "10.41.1.1:1000", 0), sf(1, "10.41.2.1:1001", mptcppm.SubflowBackupLocal)}},
			steps:    [][]backend.Device{{a1}},
			wantSets: nil,
		},
		{
			name:   "weight back to 1 clears; a CPE no longer served is cleared",
			kernel: fakeSubflows{sfs: []mptcppm.Subflow{sf(1, "10.41.2.1:1001", 0), sf(2, "10.42.1.1:1", 0)}},
			steps:  [][]backend.Device{{a1, a2}, {cpePaths("cpe-a", "10.41.1.1", "10.41.2.1", 1, 1)}},
			wantSets: []string{"10.41.2.1:1001 backup", "10.42.1.1:1 backup",
				"10.41.2.1:1001 clear", "10.42.1.1:1 clear"},
		},
		{
			name:       "shared address: the later id is not applied",
			kernel:     fakeSubflows{sfs: []mptcppm.Subflow{sf(1, "10.41.2.1:1001", 0)}},
			steps:      [][]backend.Device{{cpePaths("cpe-z", "10.41.9.9", "10.41.2.1", 1, 1), a1}},
			wantSets:   []string{"10.41.2.1:1001 backup"},
			notApplied: []string{"cpe-z"},
		},
		{
			name:       "kernel ignores the command: read-back fails, CPE not applied",
			kernel:     fakeSubflows{sfs: []mptcppm.Subflow{sf(1, "10.41.2.1:1001", 0)}, ignore: true},
			steps:      [][]backend.Device{{a1, a2}},
			wantSets:   []string{"10.41.2.1:1001 backup"},
			notApplied: []string{"cpe-a"},
		},
		{
			name:       "command refused: CPE not applied",
			kernel:     fakeSubflows{sfs: []mptcppm.Subflow{sf(1, "10.41.2.1:1001", 0)}, setErr: errors.New("EINVAL")},
			steps:      [][]backend.Device{{a1}},
			wantSets:   []string{"10.41.2.1:1001 backup"},
			notApplied: []string{"cpe-a"},
		},
		{
			name:    "listing fails: error",
			kernel:  fakeSubflows{listErr: errors.New("EPERM")},
			steps:   [][]backend.Device{{a1}},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := tt.kernel
			d, err := NewDownlink(DownlinkConfig{PM: &k, Events: noEvents{}})
			if err != nil {
				t.Fatal(err)
			}
			var notApplied map[string]error
			for _, step := range tt.steps {
				notApplied, err = d.ApplyAll(context.Background(), step)
			}
			if (err != nil) != tt.wantErr {
				t.Fatalf("ApplyAll err = %v, want error %t", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.wantSets, k.sets); diff != "" {
				t.Errorf("commands (-want +got):\n%s", diff)
			}
			var ids []string
			for id := range notApplied {
				ids = append(ids, id)
			}
			if diff := cmp.Diff(tt.notApplied, ids); diff != "" {
				t.Errorf("not applied (-want +got):\n%s (%v)", diff, notApplied)
			}
		})
	}
	if _, err := NewDownlink(DownlinkConfig{}); err == nil {
		t.Error("NewDownlink without PM succeeded")
	}
}

// TestDownlinkEvents: a new subflow to an address at weight 0 is flagged
// from its event; one to an address at weight 1 or unknown is not.
func TestDownlinkEvents(t *testing.T) {
	k := fakeSubflows{sfs: []mptcppm.Subflow{sf(7, "10.41.2.1:2000", 0), sf(7, "10.41.1.1:2001", 0)}}
	d, err := NewDownlink(DownlinkConfig{PM: &k, Events: noEvents{}})
	if err != nil {
		t.Fatal(err)
	}
	k.sfs, k.sets = nil, nil
	if _, err := d.ApplyAll(context.Background(), []backend.Device{cpePaths("cpe-a", "10.41.1.1", "10.41.2.1", 1, 0)}); err != nil {
		t.Fatal(err)
	}
	k.sfs = []mptcppm.Subflow{sf(7, "10.41.2.1:2000", 0), sf(7, "10.41.1.1:2001", 0)}
	d.onEvents([]mptcppm.Event{
		{Type: mptcppm.EventSubEstablished, Token: 7, Local: netip.MustParseAddrPort("10.40.0.2:5201"), Remote: netip.MustParseAddrPort("10.41.2.1:2000")},
		{Type: mptcppm.EventEstablished, Token: 7, Local: netip.MustParseAddrPort("10.40.0.2:5201"), Remote: netip.MustParseAddrPort("10.41.1.1:2001")},
		{Type: mptcppm.EventSubClosed, Token: 7, Local: netip.MustParseAddrPort("10.40.0.2:5201"), Remote: netip.MustParseAddrPort("10.41.2.1:2000")},
	})
	if diff := cmp.Diff([]string{"10.41.2.1:2000 backup"}, k.sets); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}
