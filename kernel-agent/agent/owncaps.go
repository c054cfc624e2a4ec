package agent

import (
	"maps"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// ownCaps is the most the backend's caps let each WAT of d send (Mbit/s
// per capped WAT; nil: none capped), for the telemetry sampler, which
// reports a WAT held by its cap as censored (telemetry.CappedFill). It is
// called on the loop goroutine, which owns the backend.
func (a *Agent) ownCaps(d *device) map[string]float64 {
	cr, ok := a.deps.Backend.(backend.CapsReporter)
	if !ok || d.applied.Paths == nil || d.unexpr != nil {
		return nil
	}
	return watLimits(d.applied, cr.AppliedCaps(d.id), a.appliedClasses(d))
}

// watLimits is what bounds each WAT of a device in the kernel: the WAT's
// own cap (applied, as AppliedCaps reports it) where it has one; else, on
// a WAT the default rule does not use and some class does, the sum of the
// classes' ceilings there when each has one (classes, as AppliedClasses
// reports them; a class that does not use the WAT has its floor as its
// ceiling). The default rule's leaf is then at its floor too (a few
// kbit/s, left out). A WAT used by the default rule without a cap, or by
// a class without a ceiling, is not bounded by the agent.
func watLimits(applied backend.Device, capsMbps map[string]float64, classes map[string]payload.AppliedClass) map[string]float64 {
	out := maps.Clone(capsMbps)
	if len(applied.Classes) == 0 {
		return out
	}
	for _, p := range applied.Paths {
		if _, capped := capsMbps[p.WAT]; capped || p.Weight > 0 {
			continue
		}
		sum, used := 0.0, false
		for _, c := range applied.Classes {
			ceil, ok := classes[c.Name].CapsMbps[p.WAT]
			if !ok {
				sum = -1
				break
			}
			sum += ceil
			used = used || c.Weights[p.WAT] > 0
		}
		if sum > 0 && used {
			if out == nil {
				out = map[string]float64{}
			}
			out[p.WAT] = sum
		}
	}
	return out
}
