//go:build linux

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// rates is Mbit/s per WAT in one direction over a window.
type rates map[string]float64

func (r rates) total() float64 {
	s := 0.0
	for _, v := range r {
		s += v
	}
	return s
}

func (r rates) share(wat string) float64 {
	if r.total() == 0 {
		return 0
	}
	return r[wat] / r.total()
}

// String lists the WATs in the schemas' order.
func (r rates) String() string {
	var b strings.Builder
	for _, wat := range []string{"nr", "lte", "wifi", "lifi"} {
		if v, ok := r[wat]; ok {
			fmt.Fprintf(&b, "%s %5.1f  ", wat, v)
		}
	}
	return strings.TrimSpace(b.String())
}

// linkCounters returns per WAT the bytes received and sent on its
// interface (ifcs: WAT -> interface name) in namespace ns; on the CPE that
// is the WAT's downlink and uplink.
func linkCounters(t *testing.T, ns netns.NsHandle, ifcs map[string]string) (rx, tx map[string]uint64) {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	rx, tx = map[string]uint64{}, map[string]uint64{}
	for wat, ifc := range ifcs {
		l, err := h.LinkByName(ifc)
		if err != nil {
			t.Fatal(err)
		}
		rx[wat], tx[wat] = l.Attrs().Statistics.RxBytes, l.Attrs().Statistics.TxBytes
	}
	return rx, tx
}

// diffRates turns two counter readings d apart into Mbit/s per WAT.
func diffRates(a, b map[string]uint64, d time.Duration) rates {
	r := rates{}
	for k := range b {
		r[k] = float64(b[k]-a[k]) * 8 / d.Seconds() / 1e6
	}
	return r
}

// measureLinks returns the Mbit/s received and sent per WAT over about d
// (the window actually elapsed between the two readings).
func measureLinks(t *testing.T, ns netns.NsHandle, ifcs map[string]string, d time.Duration) (rx, tx rates) {
	t.Helper()
	rx0, tx0 := linkCounters(t, ns, ifcs)
	start := time.Now()
	time.Sleep(d)
	rx1, tx1 := linkCounters(t, ns, ifcs)
	el := time.Since(start)
	return diffRates(rx0, rx1, el), diffRates(tx0, tx1, el)
}
