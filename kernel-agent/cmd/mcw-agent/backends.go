package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/dryrun"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpshares"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpshares/cgroupmark"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpshares/pacing"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpupstream"
	"github.com/mcw-xapp/kernel-agent/backend/wrrsysctl"
	"github.com/mcw-xapp/kernel-agent/config"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// opener builds a backend from the configuration, for one role.
type opener func(ctx context.Context, cfg config.Config, log *slog.Logger) (backend.Backend, error)

// openers are one backend's: the CPE role's writes this host's own paths,
// the proxy role's the downlink of every CPE the proxy serves.
type openers struct{ cpe, proxy opener }

// backends is every backend the agent runs, one row each, under its name
// in payload.Backends (a test holds the two to the same names).
//
// node_exporter has each collector register itself from an init function
// into a table in its one collector package. Here the backends are
// packages of their own, so such a registry would need main to import each
// of them for the side effect (the list again, as blank imports); their
// constructors read the backend sections of config.Config, which would
// make every kernel writer import config; and mptcp-shares' constructors
// combine packages (mptcp-upstream's on/off and the pacer). So the table is
// written here once, a literal nothing changes after start.
var backends = map[string]openers{
	payload.BackendWRRSysctl:     {cpe: own(openWRRSysctl), proxy: openWRRSysctlDownlink},
	payload.BackendMPTCPUpstream: {cpe: own(openMPTCPUpstream), proxy: openMPTCPUpstreamDownlink},
	payload.BackendMPTCPShares:   {cpe: openMPTCPShares, proxy: openMPTCPSharesDownlink},
	payload.BackendDryRun:        {cpe: own(openDryRun), proxy: openDryRunDownlink},
}

// errUnknownBackend: the configuration names a backend this agent does
// not have (config.Validate refuses such a name first; a Config built in
// code meets this).
var errUnknownBackend = errors.New("not a backend of this agent")

// openBackend builds the configured backend for the configured role. The
// name is looked up before the role is, so an unknown name is the same
// error in both roles.
func openBackend(ctx context.Context, cfg config.Config, log *slog.Logger) (backend.Backend, error) {
	o, ok := backends[cfg.Backend]
	if !ok {
		return nil, fmt.Errorf("backend %q: %w", cfg.Backend, errUnknownBackend)
	}
	if cfg.IsProxy() {
		return o.proxy(ctx, cfg, log)
	}
	return o.cpe(ctx, cfg, log)
}

// own adapts the constructor of a host's own kernel writer (backend.Local)
// to opener.
func own(open func(ctx context.Context, cfg config.Config) (backend.Local, error)) opener {
	return func(ctx context.Context, cfg config.Config, _ *slog.Logger) (backend.Backend, error) {
		l, err := open(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return backend.Own(l), nil
	}
}

func wrrConfig(cfg config.Config) wrrsysctl.Config {
	return wrrsysctl.Config{
		ProcSysRoot: cfg.WRRSysctl.ProcSysRoot, SysRoot: cfg.WRRSysctl.SysRoot,
		Scheduler: cfg.WRRSysctl.Scheduler, CwndLimited: cfg.WRRSysctl.CwndLimited,
	}
}

func openWRRSysctl(_ context.Context, cfg config.Config) (backend.Local, error) {
	return wrrsysctl.New(wrrConfig(cfg))
}

func openWRRSysctlDownlink(_ context.Context, cfg config.Config, _ *slog.Logger) (backend.Backend, error) {
	return wrrsysctl.NewDownlink(wrrsysctl.DownlinkConfig{Config: wrrConfig(cfg)})
}

func openDryRun(context.Context, config.Config) (backend.Local, error) { return dryrun.New(), nil }

func openDryRunDownlink(context.Context, config.Config, *slog.Logger) (backend.Backend, error) {
	return dryrun.NewDownlink(), nil
}

func openMPTCPUpstream(context.Context, config.Config) (backend.Local, error) {
	pm, sf, err := dialPM()
	if err != nil {
		return nil, err
	}
	return mptcpupstream.New(pm, sf), nil
}

// dialPM opens the path manager of the agent's namespace and sock_diag
// there, which shows whether a returned link's endpoint got its subflows
// back (mptcpupstream.Backend.Rejoin).
func dialPM() (*mptcppm.Conn, *mptcppm.Diag, error) {
	pm, err := mptcppm.Dial()
	if err != nil {
		return nil, nil, err
	}
	sf, err := mptcppm.DialDiag()
	if err != nil {
		pm.Close()
		return nil, nil, err
	}
	return pm, sf, nil
}

// openMPTCPUpstreamDownlink: the proxy flags subflows one by one, which
// only the userspace path manager allows; the CPEs' in-kernel path
// managers open the subflows. Selected here, at start, like every setting
// the agent owns; connections opened before keep their path manager.
func openMPTCPUpstreamDownlink(_ context.Context, cfg config.Config, log *slog.Logger) (backend.Backend, error) {
	if err := mptcpupstream.EnsureUserspacePM(cfg.WRRSysctl.ProcSysRoot); err != nil {
		return nil, err
	}
	return mptcpupstream.DialDownlink(log)
}

// openMPTCPShares: the caps by HTB (traffic classes, whose cgroups need a
// marking program: without CAP_BPF classes match no cgroup, and the
// reason is logged here) or by pacing (no classes).
func openMPTCPShares(ctx context.Context, cfg config.Config, log *slog.Logger) (backend.Backend, error) {
	pm, sf, err := dialPM()
	if err != nil {
		return nil, err
	}
	if cfg.MPTCPShares.Enforcement() == config.EnforcePacing {
		// A CPE's sockets on a WAT have the WAT's address as local
		// address. The pacer is detached when ctx ends or the backend
		// closes, whichever comes first.
		p, err := pacing.Attach(ctx, cfg.MPTCPShares.PacingCgroup, pacing.LocalAddr)
		if err != nil {
			pm.Close()
			sf.Close()
			return nil, err
		}
		b, err := mptcpshares.NewPaced(pm, sf, p, cfg.MPTCPShares.LinkMbps)
		if err != nil {
			pm.Close()
			sf.Close()
			p.Close()
			return nil, err
		}
		return backend.Own(b), nil
	}
	h, err := mptcpshares.NewHandle()
	if err != nil {
		pm.Close()
		sf.Close()
		return nil, fmt.Errorf("netlink: %w", err)
	}
	var marker mptcpshares.CgroupMarker
	if m, err := cgroupmark.New(); err != nil {
		log.Warn("traffic classes will not match cgroups", "reason", err.Error())
	} else {
		marker = m
	}
	b, err := mptcpshares.New(h, pm, sf, cfg.MPTCPShares.LinkMbps, func() error { h.Close(); return nil }, marker)
	if err != nil {
		pm.Close()
		sf.Close()
		h.Close()
		if marker != nil {
			marker.Close()
		}
		return nil, err
	}
	return backend.Own(b), nil
}

// openMPTCPSharesDownlink: weight 0 is the backup flag as on
// mptcp-upstream (same path manager needs); the caps are HTB classes on
// the egress, or the pacer's rates.
func openMPTCPSharesDownlink(ctx context.Context, cfg config.Config, log *slog.Logger) (backend.Backend, error) {
	if err := mptcpupstream.EnsureUserspacePM(cfg.WRRSysctl.ProcSysRoot); err != nil {
		return nil, err
	}
	onoff, err := mptcpupstream.DialDownlink(log)
	if err != nil {
		return nil, err
	}
	if cfg.MPTCPShares.Enforcement() == config.EnforcePacing {
		// The proxy's sockets towards a CPE have the CPE's WAT address as
		// remote address.
		p, err := pacing.Attach(ctx, cfg.MPTCPShares.PacingCgroup, pacing.RemoteAddr)
		if err != nil {
			onoff.Close()
			return nil, err
		}
		d, err := mptcpshares.NewDownlink(mptcpshares.DownlinkConfig{OnOff: onoff, Pacer: p, LinkMbps: cfg.MPTCPShares.LinkMbps,
			MaxClasses: cfg.MPTCPShares.MaxClasses})
		if err != nil {
			onoff.Close()
			p.Close()
			return nil, err
		}
		return d, nil
	}
	h, err := mptcpshares.NewHandle()
	if err != nil {
		onoff.Close()
		return nil, fmt.Errorf("netlink: %w", err)
	}
	d, err := mptcpshares.NewDownlink(mptcpshares.DownlinkConfig{NL: h, OnOff: onoff, LinkMbps: cfg.MPTCPShares.LinkMbps,
		MaxClasses: cfg.MPTCPShares.MaxClasses, Close: func() error { h.Close(); return nil }})
	if err != nil {
		onoff.Close()
		h.Close()
		return nil, err
	}
	return d, nil
}
