package dryrun

import (
	"context"
	"fmt"
	"sync"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// Downlink is the proxy role's dry-run backend: it records every ApplyAll
// and touches nothing. It is safe for concurrent use.
type Downlink struct {
	mu      sync.Mutex
	applied [][]backend.Device
	err     error
	refuse  map[string]error
}

// NewDownlink returns an empty recorder.
func NewDownlink() *Downlink { return &Downlink{} }

// Name implements backend.Backend.
func (*Downlink) Name() string { return payload.BackendDryRun }

// Capabilities implements backend.Backend: the full WRR range.
func (*Downlink) Capabilities() payload.Capabilities {
	return payload.Capabilities{MaxWeight: payload.MaxWeight, Semantics: payload.SemanticsWRR}
}

// SetErr makes every later ApplyAll fail with err (nil: succeed).
func (d *Downlink) SetErr(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = err
}

// Refuse makes later ApplyAll calls report cpeID as not applied with err
// (nil: accept it again), as a backend beyond its rule bound does.
func (d *Downlink) Refuse(cpeID string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.refuse == nil {
		d.refuse = map[string]error{}
	}
	if err == nil {
		delete(d.refuse, cpeID)
		return
	}
	d.refuse[cpeID] = err
}

// ApplyAll implements backend.Backend: it records cpes (refused CPEs
// left out) and checks what every backend must refuse to write.
func (d *Downlink) ApplyAll(_ context.Context, cpes []backend.Device) (map[string]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return nil, d.err
	}
	notApplied := map[string]error{}
	kept := make([]backend.Device, 0, len(cpes))
	for _, c := range cpes {
		if err, ok := d.refuse[c.CPEID]; ok {
			notApplied[c.CPEID] = err
			continue
		}
		positive := false
		for _, p := range c.Paths {
			if !p.Addr.IsValid() {
				notApplied[c.CPEID] = fmt.Errorf("dry-run: %s: %s has no address", c.CPEID, p.WAT)
			}
			positive = positive || p.Weight > 0
		}
		if !positive {
			notApplied[c.CPEID] = fmt.Errorf("dry-run: %s: no positive weight", c.CPEID)
		}
		if _, bad := notApplied[c.CPEID]; bad {
			continue
		}
		cp := backend.Device{CPEID: c.CPEID, Paths: append([]backend.Path(nil), c.Paths...)}
		kept = append(kept, cp)
	}
	d.applied = append(d.applied, kept)
	return notApplied, nil
}

// Calls returns how many ApplyAll calls succeeded.
func (d *Downlink) Calls() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.applied)
}

// Last returns the weights of every CPE in the latest ApplyAll, by CPE and
// WAT (nil before any).
func (d *Downlink) Last() map[string]payload.Weights {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.applied) == 0 {
		return nil
	}
	out := map[string]payload.Weights{}
	for _, c := range d.applied[len(d.applied)-1] {
		w := payload.Weights{}
		for _, p := range c.Paths {
			w[p.WAT] = p.Weight
		}
		out[c.CPEID] = w
	}
	return out
}

// LastPaths returns a copy of the latest ApplyAll's CPEs.
func (d *Downlink) LastPaths() []backend.Device {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.applied) == 0 {
		return nil
	}
	last := d.applied[len(d.applied)-1]
	out := make([]backend.Device, len(last))
	for i, c := range last {
		out[i] = backend.Device{CPEID: c.CPEID, Paths: append([]backend.Path(nil), c.Paths...)}
	}
	return out
}

// Rules implements backend.RuleCounter: one rule per path, no bound.
func (d *Downlink) Rules() (used, limit int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.applied) == 0 {
		return 0, 0
	}
	for _, c := range d.applied[len(d.applied)-1] {
		used += len(c.Paths)
	}
	return used, 0
}

// Close implements backend.Backend.
func (*Downlink) Close() error { return nil }
