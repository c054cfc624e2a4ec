// Package metrics holds the agent's Prometheus metrics, registered on a
// registry the caller owns (no global registry) and served on a loopback
// address by the agent.
package metrics

import (
	"math"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/mcw-xapp/kernel-agent/payload"
)

// Metrics are the agent's collectors.
type Metrics struct {
	Updates        *prometheus.CounterVec // result: applied, invalid, stale, replay, future, expired, cleared, apply_error, dropped
	Applies        *prometheus.CounterVec // cause: update, safe, link, restore, start, retry, rejoin
	ApplyErrors    prometheus.Counter     // failed backend applies
	ApplySeconds   prometheus.Histogram   // backend apply + verify
	UpdateSeconds  prometheus.Histogram   // payload in to weights verified
	LinkEvents     *prometheus.CounterVec // wat, state
	LeaseExpiries  prometheus.Counter     // leases that ran out
	Rejoins        *prometheus.CounterVec // role cpe; wat, result: readded, gave_up
	Weight         *prometheus.GaugeVec   // wat: weight in force
	ClassCeil      *prometheus.GaugeVec   // role cpe; class, wat: the class's egress ceiling in Mbit/s (+Inf unlimited)
	ClassUrgent    *prometheus.GaugeVec   // role cpe; class: 1 when urgent
	AppliedVersion prometheus.Gauge       // version in force (0: safe weights)
	PublishErrors  *prometheus.CounterVec // topic kind
	Connected      prometheus.Gauge       // MQTT connection up
	WorkerUp       *prometheus.GaugeVec   // worker: 1 while running, 0 once dead, stalled or stopped
	ProxyCPEs      *prometheus.GaugeVec   // role proxy; state: served, applied, safe, unexpressed, address_conflict, classes
	ProxyRules     *prometheus.GaugeVec   // role proxy; kind: used, limit
	ProxyStates    *prometheus.CounterVec // role proxy; CPE state payloads by result: accepted, invalid
	registry       *prometheus.Registry
}

// New creates the collectors and registers them, with the Go and process
// collectors, on a new registry.
func New() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcw_agent_updates_total", Help: "Weights payloads received, by result.",
		}, []string{"result"}),
		Applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcw_agent_applies_total", Help: "Successful backend applies, by cause.",
		}, []string{"cause"}),
		ApplyErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcw_agent_apply_errors_total", Help: "Backend applies that failed or did not verify.",
		}),
		ApplySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "mcw_agent_apply_seconds", Help: "Backend apply and read-back verification time.",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 14),
		}),
		UpdateSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "mcw_agent_update_seconds", Help: "Weights payload received to weights verified in the kernel.",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 14),
		}),
		LinkEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcw_agent_link_events_total", Help: "WAT link transitions seen through rtnetlink.",
		}, []string{"wat", "state"}),
		LeaseExpiries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcw_agent_lease_expiries_total", Help: "Leases that ran out (safe weights applied).",
		}),
		Rejoins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcw_agent_rejoins_total", Help: "Role cpe: a returned link's path put back again because no connection had rejoined it (readded), or left without one after the last try (gave_up).",
		}, []string{"wat", "result"}),
		Weight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcw_agent_weight", Help: "Weight in force per WAT (after link reactions).",
		}, []string{"wat"}),
		ClassCeil: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcw_agent_class_ceil_mbps", Help: "Role cpe: egress ceiling per traffic class in force and WAT, Mbit/s (0.064: the class does not use the WAT; +Inf: unlimited).",
		}, []string{"class", "wat"}),
		ClassUrgent: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcw_agent_class_urgent", Help: "Role cpe: 1 when the traffic class in force leaves each WAT's egress queue first.",
		}, []string{"class"}),
		AppliedVersion: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mcw_agent_applied_version", Help: "Weights version in force; 0 while safe weights are in force.",
		}),
		PublishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcw_agent_publish_errors_total", Help: "MQTT publishes that failed or were dropped.",
		}, []string{"topic"}),
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mcw_agent_mqtt_connected", Help: "1 while the MQTT connection is up.",
		}),
		WorkerUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcw_agent_worker_up", Help: "1 while the worker runs and beats; 0 once it died, stalled or stopped.",
		}, []string{"worker"}),
		ProxyCPEs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcw_agent_proxy_cpes", Help: "Role proxy: CPEs served, with downlink weights applied, on safe weights, not expressible (no address or beyond the rule bound), in an address conflict, with traffic classes applied.",
		}, []string{"state"}),
		ProxyRules: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcw_agent_proxy_rules", Help: "Role proxy: kernel rules written for all CPEs (used) and their bound (limit; 0: none).",
		}, []string{"kind"}),
		ProxyStates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcw_agent_proxy_cpe_states_total", Help: "Role proxy: CPE agents' state payloads received, by result.",
		}, []string{"result"}),
		registry: r,
	}
	r.MustRegister(m.Updates, m.Applies, m.ApplyErrors, m.ApplySeconds, m.UpdateSeconds,
		m.LinkEvents, m.LeaseExpiries, m.Rejoins, m.Weight, m.ClassCeil, m.ClassUrgent, m.AppliedVersion, m.PublishErrors, m.Connected, m.WorkerUp,
		m.ProxyCPEs, m.ProxyRules, m.ProxyStates,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// SetClasses replaces the class gauges with classes, the applied classes
// on the WATs wats (nil: none in force).
func (m *Metrics) SetClasses(classes map[string]payload.AppliedClass, wats []string) {
	m.ClassCeil.Reset()
	m.ClassUrgent.Reset()
	for name, c := range classes {
		for _, w := range wats {
			ceil, ok := c.CapsMbps[w]
			if !ok {
				ceil = math.Inf(1)
			}
			m.ClassCeil.WithLabelValues(name, w).Set(ceil)
		}
		u := 0.0
		if c.Urgent {
			u = 1
		}
		m.ClassUrgent.WithLabelValues(name).Set(u)
	}
}

// SetWorkerUp sets WorkerUp of worker (a supervisor.Config.OnChange).
func (m *Metrics) SetWorkerUp(worker string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	m.WorkerUp.WithLabelValues(worker).Set(v)
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// Registry returns the registry (for tests).
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// Value reads a counter or gauge (tests and tools; -1 when it cannot be
// read).
func Value(c prometheus.Metric) float64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		return -1
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}
