package agent

import (
	"github.com/mcw-xapp/kernel-agent/backend"
)

// ownLimit is how the backend's own limits hold one WAT of a device in
// its sending direction, for the telemetry sampler, which reports a WAT
// so held as censored (telemetry.CappedFill).
type ownLimit struct {
	capMbps float64 // the WAT's cap (0: none)
	floored bool    // the default rule's traffic is held at its floor
}

// ownLimits are the limits of d's WATs in the kernel (nil: none). It is
// called on the loop goroutine, which owns the backend.
func (a *Agent) ownLimits(d *device) map[string]ownLimit {
	if d.applied.Paths == nil || d.unexpr != nil {
		return nil
	}
	var caps map[string]float64
	if cr, ok := a.deps.Backend.(backend.CapsReporter); ok {
		caps = cr.AppliedCaps(d.id)
	}
	return watLimits(d.applied, caps, a.cfg.LinkMbps)
}

// watLimits combines the WATs' caps as applied (AppliedCaps) with the
// floors of applied: a WAT at weight 0 that a class uses cannot be made
// backup, so a backend holds the default rule's traffic there at its floor
// (see backend.Class). A cap at the WAT's link rate (linkMbps; mptcp-shares
// keeps one on a WAT an urgent class uses) is left out: it holds the WAT
// where its link would, so what the WAT delivers measures the link.
func watLimits(applied backend.Device, capsMbps, linkMbps map[string]float64) map[string]ownLimit {
	out := map[string]ownLimit{}
	for wat, c := range capsMbps {
		if link, ok := linkMbps[wat]; !ok || !backend.AtLinkRate(c, link) {
			out[wat] = ownLimit{capMbps: c}
		}
	}
	for _, p := range applied.Paths {
		if p.Weight <= 0 && backend.ClassUses(applied.Classes, p.WAT) {
			l := out[p.WAT]
			l.floored = true
			out[p.WAT] = l
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
