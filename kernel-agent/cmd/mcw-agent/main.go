// Command mcw-agent is the CPE agent of the multi-connectivity weights
// xApp: it receives per-WAT weights over MQTT 5 (mutual TLS), applies them
// to the kernel's MPTCP scheduler through a backend, reacts to links going
// down by itself, falls back to safe weights when the xApp's lease runs
// out, and reports state and subflow telemetry.
//
// Usage:
//
//	mcw-agent -config /etc/mcw-agent/agent.yaml
//
// It needs CAP_NET_ADMIN only (see deploy/mcw-agent.service).
package main

import (
	"context"
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
	"github.com/mcw-xapp/kernel-agent/backend/mptcpupstream"
	"github.com/mcw-xapp/kernel-agent/backend/wrrsysctl"
	"github.com/mcw-xapp/kernel-agent/config"
	"github.com/mcw-xapp/kernel-agent/linkwatch"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
	"github.com/mcw-xapp/kernel-agent/mqttclient"
	"github.com/mcw-xapp/kernel-agent/payload"
	"github.com/mcw-xapp/kernel-agent/state"
	"github.com/mcw-xapp/kernel-agent/supervisor"
	"github.com/mcw-xapp/kernel-agent/telemetry"
)

func main() {
	fs := flag.NewFlagSet("mcw-agent", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: mcw-agent -config FILE [-check]\n\n"+
			"Applies the xApp's per-WAT MPTCP weights on this CPE (see deploy/agent.example.yaml).\n\n")
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
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("cpe_id", cfg.CPEID)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, log); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

// run wires the agent together and runs it until ctx ends (nil) or one of
// its workers dies or stalls (the error; main exits 1 and systemd restarts
// the agent from its persisted state).
func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	be, err := newBackend(cfg)
	if err != nil {
		return err
	}
	defer be.Close()
	store, err := state.New(cfg.StateDir)
	if err != nil {
		return err
	}
	m := metrics.New()

	wats := map[string]string{}
	ifaces := make([]string, 0, len(cfg.WATs))
	for name, w := range cfg.WATs {
		wats[name] = w.Interface
		ifaces = append(ifaces, w.Interface)
	}
	deps := agent.Deps{Backend: be, Store: store, Links: linkwatch.New(ifaces), Metrics: m, Log: log}
	if cfg.Telemetry.IntervalMs > 0 {
		sd, err := telemetry.Dial()
		if err != nil {
			return err
		}
		defer sd.Close()
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
	sup := supervisor.New(supervisor.Config{Log: log, OnChange: m.SetWorkerUp})

	if cfg.MetricsListen != "" {
		ln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", m.Handler())
		mux.Handle("/healthz", sup)
		sup.Add(serveWorker(ln, mux))
		log.Info("metrics listening", "addr", ln.Addr().String())
	}

	tlsCfg, err := mqttclient.LoadTLS(cfg.MQTT.CAFile, cfg.MQTT.CertFile, cfg.MQTT.KeyFile)
	if err != nil {
		return err
	}
	mctx, mcancel := context.WithCancel(context.Background()) // outlives ctx for the goodbye
	defer mcancel()
	client, err := mqttclient.Connect(mctx, mqttclient.Config{
		BrokerURL: cfg.MQTT.BrokerURL, TLS: tlsCfg, CPEID: cfg.CPEID, KeepAlive: cfg.MQTT.KeepAliveS,
		OnWeights: a.HandleWeights,
		OnConnect: func() {
			m.Connected.Set(1)
			log.Info("mqtt connected", "broker", cfg.MQTT.BrokerURL)
			a.Republish()
		},
		OnDisconnect: func() { m.Connected.Set(0); log.Warn("mqtt connection lost") },
		OnError:      func(err error) { log.Warn("mqtt", "err", err) },
	})
	if err != nil {
		return err
	}
	for _, w := range a.Workers(client) {
		sup.Add(w)
	}
	sup.Add(supervisor.Worker{Name: "mqtt", Run: func(ctx context.Context, _ func()) error {
		// autopaho reconnects by itself and its keepalive detects a dead
		// connection; what must not happen is the manager giving up.
		select {
		case <-ctx.Done():
			return nil
		case <-client.Done():
			return errors.New("mqtt: connection manager stopped")
		}
	}})
	log.Info("agent starting", "backend", be.Name(), "wats", wats, "safe_weights", cfg.SafeWeights.String(),
		"max_clock_skew", cfg.Lease.MaxClockSkew().String())
	runErr := sup.Run(ctx)

	// Goodbye within a deadline: say offline (what the will would say),
	// then disconnect cleanly so the broker does not fire the will again.
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := client.PublishState(sctx, payload.Offline(cfg.CPEID)); err != nil {
		log.Warn("offline state not published", "err", err)
	}
	if err := client.Disconnect(sctx); err != nil {
		log.Warn("disconnect", "err", err)
	}
	log.Info("agent stopped")
	return runErr
}

func newBackend(cfg config.Config) (backend.Backend, error) {
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
	default:
		return dryrun.New(), nil
	}
}
