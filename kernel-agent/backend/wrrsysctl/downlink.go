package wrrsysctl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// The proxy's tuple list. The WRR kernel's rules are global and the
// scheduler runs at the sender, so on the MPTCP proxy the downlink of every
// CPE it serves is one list: per CPE and WAT a tuple with the source and
// ports wildcards and the CPE's WAT address as destination (a subflow's
// remote address at the proxy).
//
// Bound: at most MaxProxyTuples tuples (Config.MaxTuples may lower it). A
// tuple of this shape prints as at most 21 characters ("0 4294967295 255 0
// 0 "), so the list stays under 2,700 bytes, inside the one page the kernel
// prints a sysctl in; its parser is not public, so the writer keeps that
// margin instead of probing it. Tuples of weight 1 are left out: the kernel
// gives unmatched subflows weight 1 anyway, so a CPE at 1/1/1 costs nothing
// and the bound covers only weights that differ from the default.
//
// Beyond the bound: CPEs are taken in id order and each goes in whole or
// not at all; a CPE whose tuples do not fit is returned as not applied
// (wrapping ErrTupleBound) and counted, and the CPEs after it that still fit
// go in. The kernel gives the subflows of a CPE left out weight 1 each,
// plain round-robin over its WATs, which is the CPE's downlink until the
// list has room again.
const MaxProxyTuples = 128

// ErrTupleBound is wrapped by the not-applied error of a CPE left out
// because the tuple list is full.
var ErrTupleBound = errors.New("tuple list full")

// Downlink writes the proxy's global tuple list. It is safe for concurrent
// use (Rules may be read while ApplyAll runs).
type Downlink struct {
	b   *Backend
	max int

	mu               sync.Mutex
	used, overflowed int
}

// DownlinkConfig configures a Downlink.
type DownlinkConfig struct {
	Config
	// MaxTuples bounds the tuple list; 0 means MaxProxyTuples, more is an
	// error.
	MaxTuples int
}

// NewDownlink returns the proxy writer; like New it does not touch the
// kernel before the first ApplyAll.
func NewDownlink(cfg DownlinkConfig) (*Downlink, error) {
	if cfg.MaxTuples < 0 || cfg.MaxTuples > MaxProxyTuples {
		return nil, fmt.Errorf("wrr-sysctl downlink: max_tuples %d outside [1, %d]", cfg.MaxTuples, MaxProxyTuples)
	}
	if cfg.MaxTuples == 0 {
		cfg.MaxTuples = MaxProxyTuples
	}
	b, err := New(cfg.Config)
	if err != nil {
		return nil, err
	}
	return &Downlink{b: b, max: cfg.MaxTuples}, nil
}

// Name implements backend.Backend.
func (*Downlink) Name() string { return payload.BackendWRRSysctl }

// Capabilities implements backend.Backend: one byte per weight, and the
// directions are independent (the CPE's own list steers its uplink).
func (*Downlink) Capabilities() payload.Capabilities {
	return payload.Capabilities{MaxWeight: payload.MaxWeight, Semantics: payload.SemanticsWRR}
}

// Close implements backend.Backend.
func (*Downlink) Close() error { return nil }

// Rules implements backend.RuleCounter: the tuples written by the last
// successful ApplyAll and the bound.
func (d *Downlink) Rules() (used, limit int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.used, d.max
}

// OverflowCPEs is how many CPEs the last successful ApplyAll left out for
// the bound (not for other reasons).
func (d *Downlink) OverflowCPEs() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.overflowed
}

var (
	_ backend.Backend     = (*Downlink)(nil)
	_ backend.RuleCounter = (*Downlink)(nil)
)

// ProxyTuples computes the list for cpes: CPEs sorted by id, each CPE's
// paths in canonical WAT order, weight-1 tuples omitted, at most max
// tuples. It returns the tuples and, per CPE left out, why. Pure: the
// shared vectors check it.
func ProxyTuples(cpes []backend.Device, max int) ([]Tuple, map[string]error) {
	notApplied := map[string]error{}
	sorted := slices.SortedFunc(slices.Values(cpes), func(a, b backend.Device) int { return cmp.Compare(a.CPEID, b.CPEID) })
	order := map[string]int{}
	for i, w := range payload.WATs() {
		order[w] = i
	}
	var out []Tuple
	owner := map[[4]byte]string{}
	for _, c := range sorted {
		paths := slices.SortedFunc(slices.Values(c.Paths), func(a, b backend.Path) int {
			return cmp.Or(cmp.Compare(rank(order, a.WAT), rank(order, b.WAT)), cmp.Compare(a.WAT, b.WAT))
		})
		var mine []Tuple
		var bad error
		for _, p := range paths {
			if !p.Addr.IsValid() {
				// The CPE reported no address for this WAT: it has no
				// subflow there to weigh.
				continue
			}
			a := p.Addr.Unmap()
			if !a.Is4() {
				bad = fmt.Errorf("%s address %s: the WRR kernel matches IPv4 only", p.WAT, p.Addr)
				break
			}
			if p.Weight < 0 || p.Weight > payload.MaxWeight {
				bad = fmt.Errorf("%s weight %d outside [0, %d]", p.WAT, p.Weight, payload.MaxWeight)
				break
			}
			if other, ok := owner[a.As4()]; ok && other != c.CPEID {
				bad = fmt.Errorf("%s address %s is also %s's", p.WAT, a, other)
				break
			}
			if p.Weight != 1 {
				mine = append(mine, Tuple{Dst: a, Weight: p.Weight})
			}
		}
		if bad != nil {
			notApplied[c.CPEID] = bad
			continue
		}
		if len(out)+len(mine) > max {
			notApplied[c.CPEID] = fmt.Errorf("%w: %d tuples needed, %d of %d used", ErrTupleBound, len(mine), len(out), max)
			continue
		}
		for _, p := range paths {
			if p.Addr.IsValid() {
				owner[p.Addr.Unmap().As4()] = c.CPEID
			}
		}
		out = append(out, mine...)
	}
	return out, notApplied
}

func rank(order map[string]int, wat string) int {
	if r, ok := order[wat]; ok {
		return r
	}
	return len(order)
}

// ApplyAll implements backend.Backend: it writes the whole list and reads
// it back; a failed write or read-back is an error (nothing is reported
// applied), since the list is one file.
func (d *Downlink) ApplyAll(_ context.Context, cpes []backend.Device) (map[string]error, error) {
	tuples, notApplied := ProxyTuples(cpes, d.max)
	if err := d.b.prepare(); err != nil {
		return nil, err
	}
	text, err := Format(tuples)
	if err != nil {
		return nil, fmt.Errorf("wrr-sysctl downlink: %w", err)
	}
	if err := writeVerify(d.b.weightsPath, text, sameTuples); err != nil {
		return nil, fmt.Errorf("wrr-sysctl downlink: weights: %w", err)
	}
	overflow := 0
	for _, err := range notApplied {
		if errors.Is(err, ErrTupleBound) {
			overflow++
		}
	}
	d.mu.Lock()
	d.used, d.overflowed = len(tuples), overflow
	d.mu.Unlock()
	return notApplied, nil
}
