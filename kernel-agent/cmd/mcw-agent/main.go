// Command mcw-agent is the agent of the multi-connectivity weights xApp.
// In role cpe (the default) it runs on a CPE: it receives per-WAT weights
// over MQTT 5 (mutual TLS), applies the uplink set to the kernel's MPTCP
// scheduler through a backend, reacts to links going down by itself, falls
// back to safe weights when the xApp's lease runs out, and reports state
// (with its WAT addresses) and subflow telemetry. In role proxy it runs
// beside an MPTCP proxy and applies the downlink set of every CPE it
// serves. Both roles run the same core (package agent).
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
	"github.com/mcw-xapp/kernel-agent/config"
	"github.com/mcw-xapp/kernel-agent/linkwatch"
	"github.com/mcw-xapp/kernel-agent/metrics"
	"github.com/mcw-xapp/kernel-agent/mqttclient"
	"github.com/mcw-xapp/kernel-agent/payload"
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

// run wires the agent together and runs it until ctx ends (nil) or one of
// its workers dies or stalls (the error; main exits 1 and systemd restarts
// the agent from its persisted state). The role is data: it picks the
// backend (a host's own, or a downlink for many CPEs) and fills the core's
// configuration; the core, its MQTT client and its workers are the same.
func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	m := metrics.New()
	var closers []func() error
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	acfg := agent.Config{
		Role: payload.RoleCPE, SafeWeights: cfg.SafeWeights, StateDir: cfg.StateDir,
		TelemetryInterval: cfg.Telemetry.Interval(), MPTCPOnly: cfg.Telemetry.OnlyMPTCP(),
		MaxClockSkew: cfg.Lease.MaxClockSkew(), Shards: cfg.MQTT.Shards, LinkMbps: cfg.MPTCPShares.LinkMbps,
	}
	be, err := openBackend(ctx, cfg, log)
	if err != nil {
		return err
	}
	closers = append(closers, be.Close)
	deps := agent.Deps{Metrics: m, Log: log, Backend: be}
	var startAttrs []any
	if cfg.IsProxy() {
		acfg.Role, acfg.ProxyID, acfg.CPEs, acfg.Prefixes = payload.RoleProxy, cfg.ProxyID, cfg.CPEs, cfg.Prefixes()
		startAttrs = []any{"cpes", len(cfg.CPEs), "registered_cpes", len(cfg.CPEPrefixes)}
	} else {
		acfg.CPEID, acfg.WATs = cfg.CPEID, map[string]string{}
		ifaces := make([]string, 0, len(cfg.WATs))
		for name, w := range cfg.WATs {
			acfg.WATs[name] = w.Interface
			ifaces = append(ifaces, w.Interface)
		}
		deps.Links = linkwatch.New(ifaces)
		startAttrs = []any{"wats", acfg.WATs}
	}
	if cfg.Telemetry.IntervalMs > 0 {
		sd, err := telemetry.Dial()
		if err != nil {
			return err
		}
		closers = append(closers, sd.Close)
		deps.Subflows = sd
	}
	a, err := agent.New(acfg, deps)
	if err != nil {
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
	willTopic, will := a.Offline()
	client, err := mqttclient.Connect(mctx, mqttclient.Config{
		BrokerURL: cfg.MQTT.BrokerURL, TLS: tlsCfg, KeepAlive: cfg.MQTT.KeepAliveS, ClientID: cfg.ClientID(),
		WillTopic: willTopic, Will: will, Subscriptions: a.Subscriptions(), OnMessage: a.HandleMessage,
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
	if w, ok := deps.Backend.(watcher); ok {
		// A backend that follows the kernel (new subflows to flag) is a
		// worker like the others: dead or stuck, the health check says so.
		sup.Add(supervisor.Worker{Name: "downlink", Run: w.Watch, Stall: downlinkStall})
	}
	sup.Add(mqttWorker(client))
	log.Info("agent starting", append([]any{"role", acfg.Role, "backend", deps.Backend.Name(),
		"safe_weights", cfg.SafeWeights.String(), "max_clock_skew", cfg.Lease.MaxClockSkew().String()}, startAttrs...)...)
	runErr := sup.Run(ctx)

	// Goodbye: what the last will would say, published before a clean
	// disconnect (so the broker does not fire the will again).
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := client.PublishRetained(sctx, willTopic, will); err != nil {
		log.Warn("offline state not published", "err", err)
	}
	if err := client.Disconnect(sctx); err != nil {
		log.Warn("disconnect", "err", err)
	}
	log.Info("agent stopped")
	return runErr
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
