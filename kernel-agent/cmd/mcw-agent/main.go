// Command mcw-agent is the agent of the multi-connectivity weights xApp.
// In role cpe (the default) it runs on a CPE: it receives per-WAT weights
// over MQTT 5 (mutual TLS), applies the uplink set to the kernel's MPTCP
// scheduler through a backend, reacts to links going down by itself, falls
// back to safe weights when the xApp's lease runs out, and reports state
// (with its WAT addresses) and subflow telemetry. In role proxy it runs
// beside an MPTCP proxy and applies the downlink set of every CPE it
// serves (package proxy).
//
// Usage:
//
//	mcw-agent -config /etc/mcw-agent/agent.yaml
//
// It needs CAP_NET_ADMIN only (see deploy/mcw-agent.service).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mcw-xapp/kernel-agent/agent"
	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/dryrun"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpshares"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpshares/pacing"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpupstream"
	"github.com/mcw-xapp/kernel-agent/backend/wrrsysctl"
	"github.com/mcw-xapp/kernel-agent/config"
	"github.com/mcw-xapp/kernel-agent/linkwatch"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
	"github.com/mcw-xapp/kernel-agent/mqttclient"
	"github.com/mcw-xapp/kernel-agent/payload"
	"github.com/mcw-xapp/kernel-agent/proxy"
	"github.com/mcw-xapp/kernel-agent/state"
	"github.com/mcw-xapp/kernel-agent/supervisor"
	"github.com/mcw-xapp/kernel-agent/telemetry"
)

func main() {
	fs := flag.NewFlagSet("mcw-agent", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: mcw-agent -config FILE [-check]\n\n"+
			"Applies the xApp's per-WAT MPTCP weights: role cpe, the uplink of this CPE (deploy/agent.example.yaml);\n"+
			"role proxy, the downlink of the CPEs an MPTCP proxy serves (deploy/proxy.example.yaml).\n\n")
		fs.PrintDefaults()
	}
	cfgPath := fs.String("config", "/etc/mcw-agent/agent.yaml", "configuration file (YAML)")
	check := fs.Bool("check", false, "validate the configuration and exit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcw-agent:", err)
		os.Exit(2)
	}
	if *check {
		fmt.Println("configuration OK")
		return
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // validated by config
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if cfg.IsProxy() {
		log = log.With("proxy_id", cfg.ProxyID)
	} else {
		log = log.With("cpe_id", cfg.CPEID)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, log); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

// role is what differs between the CPE and the proxy role; run is the
// rest, written once.
type role struct {
	name string // for the logs: "agent" or "proxy"
	// mqtt holds the role's identity and message handlers; run adds the
	// connection settings and callbacks.
	mqtt      mqttclient.Config
	republish func()
	workers   func(*mqttclient.Client) []supervisor.Worker
	// offline publishes what the last will would say, before a clean
	// disconnect (so the broker does not fire the will again).
	offline    func(context.Context, *mqttclient.Client) error
	startAttrs []any
	closers    []func() error
}

func (r *role) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
}

// run wires the role together and runs it until ctx ends (nil) or one of
// its workers dies or stalls (the error; main exits 1 and systemd restarts
// the agent from its persisted state).
func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	m := metrics.New()
	build := cpeRole
	if cfg.IsProxy() {
		build = proxyRole
	}
	r := &role{}
	defer r.close()
	if err := build(ctx, cfg, log, m, r); err != nil {
		return err
	}
	sup := supervisor.New(supervisor.Config{Log: log, OnChange: m.SetWorkerUp})
	if err := serveMetrics(cfg, m, sup, log); err != nil {
		return err
	}
	tlsCfg, err := loadTLS(cfg)
	if err != nil {
		return err
	}
	mctx, mcancel := context.WithCancel(context.Background()) // outlives ctx for the goodbye
	defer mcancel()
	mc := r.mqtt
	mc.BrokerURL, mc.TLS, mc.KeepAlive = cfg.MQTT.BrokerURL, tlsCfg, cfg.MQTT.KeepAliveS
	mc.OnConnect = func() {
		m.Connected.Set(1)
		log.Info("mqtt connected", "broker", cfg.MQTT.BrokerURL)
		r.republish()
	}
	mc.OnDisconnect = func() { m.Connected.Set(0); log.Warn("mqtt connection lost") }
	mc.OnError = func(err error) { log.Warn("mqtt", "err", err) }
	client, err := mqttclient.Connect(mctx, mc)
	if err != nil {
		return err
	}
	for _, w := range r.workers(client) {
		sup.Add(w)
	}
	sup.Add(mqttWorker(client))
	log.Info(r.name+" starting", r.startAttrs...)
	runErr := sup.Run(ctx)

	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := r.offline(sctx, client); err != nil {
		log.Warn("offline state not published", "err", err)
	}
	if err := client.Disconnect(sctx); err != nil {
		log.Warn("disconnect", "err", err)
	}
	log.Info(r.name + " stopped")
	return runErr
}

// subflows opens the sock_diag source when telemetry is on (nil otherwise).
func subflows(cfg config.Config, r *role) (*telemetry.Conn, error) {
	if cfg.Telemetry.IntervalMs <= 0 {
		return nil, nil
	}
	sd, err := telemetry.Dial()
	if err != nil {
		return nil, err
	}
	r.closers = append(r.closers, sd.Close)
	return sd, nil
}

// cpeRole builds the CPE role: the uplink of this CPE.
func cpeRole(ctx context.Context, cfg config.Config, log *slog.Logger, m *metrics.Metrics, r *role) error {
	be, err := newBackend(ctx, cfg)
	if err != nil {
		return err
	}
	r.closers = append(r.closers, be.Close)
	store, err := state.New(cfg.StateDir)
	if err != nil {
		return err
	}
	wats := map[string]string{}
	ifaces := make([]string, 0, len(cfg.WATs))
	for name, w := range cfg.WATs {
		wats[name] = w.Interface
		ifaces = append(ifaces, w.Interface)
	}
	deps := agent.Deps{Backend: be, Store: store, Links: linkwatch.New(ifaces), Metrics: m, Log: log}
	sd, err := subflows(cfg, r)
	if err != nil {
		return err
	}
	if sd != nil {
		deps.Subflows = sd
	}
	a, err := agent.New(agent.Config{
		CPEID: cfg.CPEID, WATs: wats, SafeWeights: cfg.SafeWeights,
		TelemetryInterval: cfg.Telemetry.Interval(), MPTCPOnly: cfg.Telemetry.OnlyMPTCP(),
		MaxClockSkew: cfg.Lease.MaxClockSkew(),
	}, deps)
	if err != nil {
		return err
	}
	r.name = "agent"
	r.mqtt = mqttclient.Config{CPEID: cfg.CPEID, OnWeights: a.HandleWeights}
	r.republish = a.Republish
	r.workers = func(c *mqttclient.Client) []supervisor.Worker { return a.Workers(c) }
	r.offline = func(ctx context.Context, c *mqttclient.Client) error {
		return c.PublishState(ctx, payload.Offline(cfg.CPEID))
	}
	r.startAttrs = []any{"backend", be.Name(), "wats", wats, "safe_weights", cfg.SafeWeights.String(),
		"max_clock_skew", cfg.Lease.MaxClockSkew().String()}
	return nil
}

// proxyRole builds the proxy role: the downlink of the CPEs it serves.
func proxyRole(ctx context.Context, cfg config.Config, log *slog.Logger, m *metrics.Metrics, r *role) error {
	dl, err := newDownlink(ctx, cfg, log)
	if err != nil {
		return err
	}
	r.closers = append(r.closers, dl.Close)
	deps := proxy.Deps{Downlink: dl, Metrics: m, Log: log}
	sd, err := subflows(cfg, r)
	if err != nil {
		return err
	}
	if sd != nil {
		deps.Subflows = sd
	}
	px, err := proxy.New(proxy.Config{
		ProxyID: cfg.ProxyID, CPEs: cfg.CPEs, SafeWeights: cfg.SafeWeights, StateDir: cfg.StateDir,
		TelemetryInterval: cfg.Telemetry.Interval(), MPTCPOnly: cfg.Telemetry.OnlyMPTCP(),
		MaxClockSkew: cfg.Lease.MaxClockSkew(), Prefixes: cfg.Prefixes(),
	}, deps)
	if err != nil {
		return err
	}
	r.name = "proxy"
	r.mqtt = mqttclient.Config{ProxyID: cfg.ProxyID, Subscriptions: px.Subscriptions(), OnMessage: px.HandleMessage}
	r.republish = px.Republish
	r.workers = func(c *mqttclient.Client) []supervisor.Worker {
		ws := px.Workers(c)
		if w, ok := dl.(watcher); ok {
			// A backend that follows the kernel (new subflows to flag) is a
			// worker like the others: dead or stuck, the health check says so.
			ws = append(ws, supervisor.Worker{Name: "downlink", Run: w.Watch, Stall: downlinkStall})
		}
		return ws
	}
	r.offline = func(ctx context.Context, c *mqttclient.Client) error {
		return c.PublishRetained(ctx, mqttclient.ProxyTopicsFor(cfg.ProxyID).State(), payload.ProxyOffline(cfg.ProxyID))
	}
	r.startAttrs = []any{"backend", dl.Name(), "cpes", len(cfg.CPEs), "safe_weights", cfg.SafeWeights.String()}
	return nil
}

// mqttWorker watches the connection manager: autopaho reconnects by itself
// and its keepalive detects a dead connection; what must not happen is the
// manager giving up.
func mqttWorker(client *mqttclient.Client) supervisor.Worker {
	return supervisor.Worker{Name: "mqtt", Run: func(ctx context.Context, _ func()) error {
		select {
		case <-ctx.Done():
			return nil
		case <-client.Done():
			return errors.New("mqtt: connection manager stopped")
		}
	}}
}

// loadTLS loads the client's mutual-TLS material and checks that the
// certificate's CN is the configured id: the broker's ACL knows the agent
// by its CN only, so a mismatch would leave it reading topics it may not.
func loadTLS(cfg config.Config) (*tls.Config, error) {
	tlsCfg, err := mqttclient.LoadTLS(cfg.MQTT.CAFile, cfg.MQTT.CertFile, cfg.MQTT.KeyFile)
	if err != nil {
		return nil, err
	}
	cn, err := mqttclient.CommonName(tlsCfg)
	if err != nil {
		return nil, err
	}
	if id := cfg.ClientID(); cn != id {
		key := "cpe_id"
		if cfg.IsProxy() {
			key = "proxy_id"
		}
		return nil, fmt.Errorf("mqtt.cert_file %s: certificate CN %q is not the configured %s %q", cfg.MQTT.CertFile, cn, key, id)
	}
	return tlsCfg, nil
}

// serveMetrics adds the metrics and health endpoint to sup.
func serveMetrics(cfg config.Config, m *metrics.Metrics, sup *supervisor.Supervisor, log *slog.Logger) error {
	if cfg.MetricsListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.Handle("/healthz", sup)
	sup.Add(serveWorker(ln, mux))
	log.Info("metrics listening", "addr", ln.Addr().String())
	return nil
}

// watcher is a downlink backend with a goroutine of its own (the
// mptcp-upstream downlink follows the path manager's subflow events).
type watcher interface {
	Watch(ctx context.Context, beat func()) error
}

// downlinkStall is how long the downlink watcher may go without a beat.
const downlinkStall = 10 * time.Second

// newDownlink builds the proxy role's backend.
func newDownlink(ctx context.Context, cfg config.Config, log *slog.Logger) (backend.Backend, error) {
	switch cfg.Backend {
	case payload.BackendDryRun:
		return dryrun.NewDownlink(), nil
	case payload.BackendWRRSysctl:
		return wrrsysctl.NewDownlink(wrrsysctl.DownlinkConfig{Config: wrrsysctl.Config{
			ProcSysRoot: cfg.WRRSysctl.ProcSysRoot, SysRoot: cfg.WRRSysctl.SysRoot,
			Scheduler: cfg.WRRSysctl.Scheduler, CwndLimited: cfg.WRRSysctl.CwndLimited,
		}})
	case payload.BackendMPTCPUpstream:
		// The proxy flags subflows one by one, which only the userspace
		// path manager allows; the CPEs' in-kernel path managers open the
		// subflows. Selected here, at start, like every setting the agent
		// owns; connections opened before keep their path manager.
		if err := mptcpupstream.EnsureUserspacePM(cfg.WRRSysctl.ProcSysRoot); err != nil {
			return nil, err
		}
		return mptcpupstream.DialDownlink(log)
	case payload.BackendMPTCPShares:
		// Weight 0 is the backup flag as on mptcp-upstream (same path
		// manager needs); the caps are HTB classes on the egress.
		if err := mptcpupstream.EnsureUserspacePM(cfg.WRRSysctl.ProcSysRoot); err != nil {
			return nil, err
		}
		onoff, err := mptcpupstream.DialDownlink(log)
		if err != nil {
			return nil, err
		}
		if cfg.MPTCPShares.Enforcement() == config.EnforcePacing {
			// The proxy's sockets towards a CPE have the CPE's WAT
			// address as remote address.
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
	default:
		return nil, fmt.Errorf("backend %q: no downlink implementation", cfg.Backend)
	}
}

func newBackend(ctx context.Context, cfg config.Config) (backend.Local, error) {
	switch cfg.Backend {
	case payload.BackendWRRSysctl:
		return wrrsysctl.New(wrrsysctl.Config{
			ProcSysRoot: cfg.WRRSysctl.ProcSysRoot, SysRoot: cfg.WRRSysctl.SysRoot,
			Scheduler: cfg.WRRSysctl.Scheduler, CwndLimited: cfg.WRRSysctl.CwndLimited,
		})
	case payload.BackendMPTCPUpstream:
		pm, err := mptcppm.Dial()
		if err != nil {
			return nil, err
		}
		return mptcpupstream.New(pm), nil
	case payload.BackendMPTCPShares:
		pm, err := mptcppm.Dial()
		if err != nil {
			return nil, err
		}
		if cfg.MPTCPShares.Enforcement() == config.EnforcePacing {
			// A CPE's sockets on a WAT have the WAT's address as local
			// address. The pacer is detached when ctx ends or the
			// backend closes, whichever comes first.
			p, err := pacing.Attach(ctx, cfg.MPTCPShares.PacingCgroup, pacing.LocalAddr)
			if err != nil {
				pm.Close()
				return nil, err
			}
			b, err := mptcpshares.NewPaced(pm, p, cfg.MPTCPShares.LinkMbps)
			if err != nil {
				pm.Close()
				p.Close()
				return nil, err
			}
			return b, nil
		}
		h, err := mptcpshares.NewHandle()
		if err != nil {
			pm.Close()
			return nil, fmt.Errorf("netlink: %w", err)
		}
		b, err := mptcpshares.New(h, pm, cfg.MPTCPShares.LinkMbps, func() error { h.Close(); return nil })
		if err != nil {
			pm.Close()
			h.Close()
			return nil, err
		}
		return b, nil
	default:
		return dryrun.New(), nil
	}
}
