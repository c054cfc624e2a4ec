//go:build linux

package integration

import (
	"testing"

	"github.com/vishvananda/netns"

	"github.com/mcw-xapp/kernel-agent/internal/nstest"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
)

// openNamespaces returns handles on the named network namespaces, closed
// when the test ends.
func openNamespaces(t *testing.T, names ...string) []netns.NsHandle {
	t.Helper()
	out := make([]netns.NsHandle, len(names))
	for i, name := range names {
		ns, err := netns.GetFromName(name)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = ns
		t.Cleanup(func() { ns.Close() })
	}
	return out
}

// allowSubflows sets the in-kernel path manager's limits in each namespace
// so that a connection opens a subflow per WAT and accepts the peer's joins.
func allowSubflows(t *testing.T, nss ...netns.NsHandle) {
	t.Helper()
	for _, ns := range nss {
		if err := nstest.In(ns, func() error {
			pm, err := mptcppm.Dial()
			if err != nil {
				return err
			}
			defer pm.Close()
			return pm.SetLimits(mptcppm.Limits{Subflows: 4, AddAddrAccepted: 4})
		}); err != nil {
			t.Fatalf("path manager limits: %v", err)
		}
	}
}
