// Package config reads and validates the agent's YAML configuration file
// (see deploy/agent.example.yaml for every key with its meaning).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/mcw-xapp/kernel-agent/mqttclient"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// Config is the agent's configuration.
type Config struct {
	// Role: cpe (default: apply the uplink weights of this CPE) or proxy
	// (apply the downlink weights of the CPEs in CPEs).
	Role string `yaml:"role"`
	// CPEID identifies the CPE (role cpe); it must equal its certificate's CN.
	CPEID string `yaml:"cpe_id"`
	// ProxyID identifies the proxy (role proxy); it must equal its
	// certificate's CN.
	ProxyID string `yaml:"proxy_id"`
	// CPEs are the CPEs the proxy serves (role proxy).
	CPEs []string `yaml:"cpes"`
	// CPEPrefixes is the operator's registry (role proxy, required for every
	// served CPE): per CPE, the prefixes its WAT addresses must lie in. A
	// CPE cannot claim an address outside them, whatever its state says: a
	// CPE's own claim alone never decides which traffic is its.
	CPEPrefixes map[string][]string `yaml:"cpe_prefixes"`
	MQTT        MQTT                `yaml:"mqtt"`
	// WATs maps each WAT name (nr, lte, wifi, lifi) to its interface
	// (role cpe; a proxy learns its CPEs' WATs from their state).
	WATs map[string]WAT `yaml:"wats"`
	// Backend is one of payload.Backends (deploy/agent.example.yaml says
	// what each does).
	Backend     string      `yaml:"backend"`
	WRRSysctl   WRRSysctl   `yaml:"wrr_sysctl"`
	MPTCPShares MPTCPShares `yaml:"mptcp_shares"`
	// SafeWeights apply at start without state and whenever a lease runs
	// out (role proxy: per CPE, to the CPE's WATs in the downlink).
	SafeWeights payload.Weights `yaml:"safe_weights"`
	// StateDir holds the persisted applied state.
	StateDir string `yaml:"state_dir"`
	// MetricsListen is the Prometheus endpoint's address; loopback only;
	// "" disables it.
	MetricsListen string    `yaml:"metrics_listen"`
	Telemetry     Telemetry `yaml:"telemetry"`
	Lease         Lease     `yaml:"lease"`
	// LogLevel: debug, info, warn, error.
	LogLevel string `yaml:"log_level"`
}

// MQTT is the broker connection.
type MQTT struct {
	BrokerURL  string `yaml:"broker_url"`
	CAFile     string `yaml:"ca_file"`
	CertFile   string `yaml:"cert_file"`
	KeyFile    string `yaml:"key_file"`
	KeepAliveS uint16 `yaml:"keepalive_s"`
	// Shards is the fleet's shard count, the xApp's (1..4096, default 64):
	// the agent reports on mcw/v1/s/{shard}/..., shard being FNV-1a of the
	// CPE id modulo Shards, so that each xApp replica subscribes to the
	// shards it holds. Fixed for the life of a fleet.
	Shards int `yaml:"shards"`
}

// WAT is one access technology's interface.
type WAT struct {
	Interface string `yaml:"interface"`
}

// WRRSysctl configures the wrr-sysctl backend.
type WRRSysctl struct {
	ProcSysRoot string `yaml:"proc_sys_root"`
	SysRoot     string `yaml:"sys_root"`
	Scheduler   string `yaml:"scheduler"`
	CwndLimited string `yaml:"cwnd_limited"`
}

// MPTCPShares configures the mptcp-shares backend.
type MPTCPShares struct {
	// LinkMbps is each WAT's link rate in Mbit/s. Without caps_mbps in
	// the weights message (an older xApp, or safe weights) the caps are
	// the weights' shares of the largest total these rates allow; with
	// them a cap at or above a WAT's rate leaves the WAT uncapped. Role
	// cpe: one per configured WAT. Role proxy: the rate of every served
	// CPE's WAT, one at least per WAT of safe_weights.
	LinkMbps map[string]float64 `yaml:"link_mbps"`
	// MaxClasses (role proxy) bounds the rate classes, one per capped
	// WAT of each served CPE; 0 means the backend's default (4096). With
	// enforce pacing it bounds the capped addresses (4096 at most).
	MaxClasses int `yaml:"max_classes"`
	// Enforce is how the caps are enforced: "htb" (the default) or
	// "pacing". htb shapes everything that leaves a WAT interface (role
	// cpe) or goes to a CPE's WAT address (role proxy), whatever process
	// sent it, and replaces those interfaces' root qdiscs. pacing sets
	// each socket's maximum pacing rate from a BPF sockops program,
	// which split more steadily in the measurements (the MPTCP scheduler
	// sees a paced subflow as slow before any queue builds) and touches
	// no qdisc, but only sees the sockets of processes in PacingCgroup,
	// and only those established after the agent attached: traffic from
	// elsewhere, or older connections, is not capped. It needs CAP_BPF
	// besides CAP_NET_ADMIN (see deploy/mcw-agent.service).
	Enforce string `yaml:"enforce"`
	// PacingCgroup (enforce pacing, required) is the absolute path of
	// the cgroup-v2 directory whose sockets are paced: where the MPTCP
	// converter or the user traffic runs, e.g.
	// /sys/fs/cgroup/system.slice/mptcp-converter.service (the cgroup-v2
	// root paces every process).
	PacingCgroup string `yaml:"pacing_cgroup"`
}

// Enforcement values of mptcp_shares.enforce.
const (
	EnforceHTB    = "htb"
	EnforcePacing = "pacing"
)

// Enforcement returns mptcp_shares.enforce with its default.
func (m MPTCPShares) Enforcement() string {
	if m.Enforce == "" {
		return EnforceHTB
	}
	return m.Enforce
}

// Telemetry configures the subflow statistics stream.
type Telemetry struct {
	// IntervalMs between samples; 0 disables telemetry.
	IntervalMs int `yaml:"interval_ms"`
	// MPTCPOnly counts only MPTCP subflows (default true).
	MPTCPOnly *bool `yaml:"mptcp_only"`
}

// Lease configures how the agent checks a weights update's issue time.
type Lease struct {
	// MaxClockSkewMs is how far (milliseconds) an update's issued_at_ms may
	// lie ahead of this CPE's clock before the update is refused; default
	// 5000, at most MaxClockSkewMs.
	MaxClockSkewMs *int `yaml:"max_clock_skew_ms"`
}

// MaxClockSkew returns the skew allowance with its default.
func (l Lease) MaxClockSkew() time.Duration {
	if l.MaxClockSkewMs == nil {
		return DefaultMaxClockSkew
	}
	return time.Duration(*l.MaxClockSkewMs) * time.Millisecond
}

// Clock-skew allowance: the default covers CPEs whose clock is synchronised
// loosely (SNTP every few minutes); the bound keeps a misconfigured value
// from re-opening the hole the issue-time lease closes.
const (
	DefaultMaxClockSkew = 5 * time.Second
	MaxClockSkewMs      = 60_000
)

// Interval returns the telemetry interval.
func (t Telemetry) Interval() time.Duration { return time.Duration(t.IntervalMs) * time.Millisecond }

// OnlyMPTCP returns MPTCPOnly with its default.
func (t Telemetry) OnlyMPTCP() bool { return t.MPTCPOnly == nil || *t.MPTCPOnly }

// MaxCPEs bounds the CPEs one proxy serves: every CPE is three subscriptions
// (weights, and its agent's state on the sharded and the legacy topic),
// a retained state and a share of the kernel's rules, and the WRR kernel's
// tuple list is one sysctl string.
const MaxCPEs = 1024

// IsProxy reports whether c configures the proxy role.
func (c Config) IsProxy() bool { return c.Role == payload.RoleProxy }

// ClientID returns the identity the agent connects as: its certificate's CN.
func (c Config) ClientID() string {
	if c.IsProxy() {
		return c.ProxyID
	}
	return c.CPEID
}

// MaxFileBytes bounds the configuration file (the example with every key
// and its comments is under 4 KB).
const MaxFileBytes = 64 << 10

// Load reads and validates the file at path.
func Load(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes YAML (unknown keys are errors), fills defaults and
// validates. Input above MaxFileBytes is refused before parsing; the YAML
// decoder bounds nesting depth and alias expansion itself.
func Parse(b []byte) (Config, error) {
	if len(b) > MaxFileBytes {
		return Config{}, fmt.Errorf("%d bytes, at most %d", len(b), MaxFileBytes)
	}
	c := Config{
		Role:          payload.RoleCPE,
		Backend:       payload.BackendMPTCPUpstream,
		StateDir:      "/var/lib/mcw-agent",
		MetricsListen: "127.0.0.1:9472",
		Telemetry:     Telemetry{IntervalMs: 1000},
		LogLevel:      "info",
		// Filled before decoding, so that an explicit 0 is refused.
		MQTT: MQTT{Shards: mqttclient.DefaultShards},
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return Config{}, err
	}
	if c.MQTT.KeepAliveS == 0 {
		c.MQTT.KeepAliveS = 30
	}

	return c, c.Validate()
}

// Validate checks c, returning every problem at once.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch c.Role {
	case payload.RoleCPE:
		errs = append(errs, c.validateCPE()...)
	case payload.RoleProxy:
		errs = append(errs, c.validateProxy()...)
	default:
		add("role %q: want cpe or proxy", c.Role)
	}
	switch {
	case !payload.KnownBackend(c.Backend):
		add("backend %q: want one of %s", c.Backend, strings.Join(payload.Backends(), ", "))
	case c.Backend == payload.BackendMPTCPShares:
		errs = append(errs, c.validateShares()...)
	}
	if u, err := url.Parse(c.MQTT.BrokerURL); err != nil || u.Host == "" {
		add("mqtt.broker_url %q: want e.g. mqtts://broker:8883", c.MQTT.BrokerURL)
	} else if u.Scheme != "mqtts" && u.Scheme != "tls" && u.Scheme != "ssl" {
		add("mqtt.broker_url %q: the channel is mutual TLS only (mqtts://)", c.MQTT.BrokerURL)
	}
	if c.MQTT.Shards < 1 || c.MQTT.Shards > mqttclient.MaxShards {
		add("mqtt.shards %d: want 1..%d (the xApp's shard count)", c.MQTT.Shards, mqttclient.MaxShards)
	}
	for k, v := range map[string]string{"mqtt.ca_file": c.MQTT.CAFile, "mqtt.cert_file": c.MQTT.CertFile, "mqtt.key_file": c.MQTT.KeyFile} {
		if v == "" {
			add("%s: required", k)
		}
	}
	if err := c.SafeWeights.Validate(); err != nil {
		add("safe_weights: %v", err)
	}
	if c.StateDir == "" {
		add("state_dir: required")
	}
	if c.MetricsListen != "" {
		host, _, err := net.SplitHostPort(c.MetricsListen)
		a, perr := netip.ParseAddr(host)
		if err != nil || (host != "localhost" && (perr != nil || !a.IsLoopback())) {
			add("metrics_listen %q: want a loopback host:port", c.MetricsListen)
		}
	}
	if c.Telemetry.IntervalMs != 0 && (c.Telemetry.IntervalMs < 100 || c.Telemetry.IntervalMs > 3_600_000) {
		add("telemetry.interval_ms %d: want 0 (off) or 100..3600000", c.Telemetry.IntervalMs)
	}
	if ms := c.Lease.MaxClockSkewMs; ms != nil && (*ms < 0 || *ms > MaxClockSkewMs) {
		add("lease.max_clock_skew_ms %d: want 0..%d", *ms, MaxClockSkewMs)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		add("log_level %q: want debug, info, warn or error", c.LogLevel)
	}
	return errors.Join(errs...)
}

// validateShares checks the mptcp-shares keys. Role cpe: a link rate for
// every WAT and no other. Role proxy (the CPEs' WATs are learnt from their
// state): known WATs, a rate for each WAT of the safe weights (they carry
// no caps), and the class bound.
func (c Config) validateShares() []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	need := map[string]bool{}
	if c.IsProxy() {
		for wat := range c.SafeWeights {
			need[wat] = true
		}
		if m := c.MPTCPShares.MaxClasses; m < 0 || m > mptcpSharesMaxClasses {
			add("mptcp_shares.max_classes %d: want 0 (default) or 1..%d", m, mptcpSharesMaxClasses)
		}
	} else {
		for wat := range c.WATs {
			need[wat] = true
		}
		if c.MPTCPShares.MaxClasses != 0 {
			add("mptcp_shares.max_classes: only with role proxy")
		}
	}
	switch c.MPTCPShares.Enforcement() {
	case EnforceHTB:
		if c.MPTCPShares.PacingCgroup != "" {
			add("mptcp_shares.pacing_cgroup: only with mptcp_shares.enforce pacing")
		}
	case EnforcePacing:
		switch pc := c.MPTCPShares.PacingCgroup; {
		case pc == "":
			add("mptcp_shares.pacing_cgroup: required with mptcp_shares.enforce pacing (the cgroup-v2 directory whose sockets are paced)")
		case !filepath.IsAbs(pc) || filepath.Clean(pc) != pc:
			add("mptcp_shares.pacing_cgroup %q: want a clean absolute path of a cgroup-v2 directory, e.g. /sys/fs/cgroup/system.slice/mptcp-converter.service", pc)
		}
		if m := c.MPTCPShares.MaxClasses; m > mptcpSharesMaxPaced {
			add("mptcp_shares.max_classes %d: want at most %d with enforce pacing (the pacer's address map)", m, mptcpSharesMaxPaced)
		}
	default:
		add("mptcp_shares.enforce %q: want htb or pacing", c.MPTCPShares.Enforce)
	}
	for wat := range need {
		if _, ok := c.MPTCPShares.LinkMbps[wat]; !ok {
			add("mptcp_shares.link_mbps.%s: required for backend mptcp-shares", wat)
		}
	}
	for wat, r := range c.MPTCPShares.LinkMbps {
		_, configured := c.WATs[wat]
		switch {
		case !c.IsProxy() && !configured:
			add("mptcp_shares.link_mbps.%s: not a configured WAT", wat)
		case c.IsProxy() && !payload.KnownWAT(wat):
			add("mptcp_shares.link_mbps.%s: not a known WAT", wat)
		case !(r > 0) || r > mptcpSharesMaxMbps:
			add("mptcp_shares.link_mbps.%s %v: want (0, %d]", wat, r, mptcpSharesMaxMbps)
		}
	}
	return errs
}

// mptcpSharesMaxClasses is the largest mptcpshares downlink class bound
// (16-bit class minors, 0 and 1 not used).
const mptcpSharesMaxClasses = 0xffff - 1

// mptcpSharesMaxPaced is pacing.MaxAddrs (the pacer's map size).
const mptcpSharesMaxPaced = 4096

// mptcpSharesMaxMbps is mptcpshares.MaxLinkMbps (HTB's 32-bit byte rate).
const mptcpSharesMaxMbps = 30_000

const idPattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"

// validateCPE checks the keys of role cpe.
func (c Config) validateCPE() []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !payload.ValidCPEID(c.CPEID) {
		add("cpe_id %q: want %s", c.CPEID, idPattern)
	}
	if c.ProxyID != "" || len(c.CPEs) > 0 {
		add("proxy_id, cpes: only with role proxy")
	}
	if len(c.WATs) == 0 {
		add("wats: at least one WAT")
	}
	seen := map[string]string{}
	for name, w := range c.WATs {
		if !payload.KnownWAT(name) {
			add("wats.%s: unknown WAT (nr, lte, wifi, lifi)", name)
		}
		if w.Interface == "" || len(w.Interface) > 15 {
			add("wats.%s.interface %q: want an interface name", name, w.Interface)
		}
		if other, dup := seen[w.Interface]; dup {
			add("wats.%s and wats.%s share interface %s", name, other, w.Interface)
		}
		seen[w.Interface] = name
	}
	for name := range c.SafeWeights {
		if _, ok := c.WATs[name]; !ok {
			add("safe_weights.%s: not in wats", name)
		}
	}
	return errs
}

// validateProxy checks the keys of role proxy.
func (c Config) validateProxy() []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !payload.ValidCPEID(c.ProxyID) {
		add("proxy_id %q: want %s", c.ProxyID, idPattern)
	}
	if c.CPEID != "" || len(c.WATs) > 0 {
		add("cpe_id, wats: only with role cpe (a proxy learns its CPEs' WATs from their state)")
	}
	if len(c.CPEs) == 0 || len(c.CPEs) > MaxCPEs {
		add("cpes: %d CPEs, want 1..%d", len(c.CPEs), MaxCPEs)
	}
	seen := map[string]bool{}
	for i, id := range c.CPEs {
		switch {
		case !payload.ValidCPEID(id):
			add("cpes[%d] %q: want %s", i, id, idPattern)
		case seen[id]:
			add("cpes[%d] %q: listed twice", i, id)
		case id == c.ProxyID:
			add("cpes[%d] %q: the proxy's own id", i, id)
		}
		seen[id] = true
	}
	for _, id := range c.CPEs {
		if _, listed := c.CPEPrefixes[id]; !listed && payload.ValidCPEID(id) && id != c.ProxyID {
			add("cpe_prefixes[%s]: missing: the operator's registry says which addresses are the CPE's own (its claim alone is not trusted)", id)
		}
	}
	var entries []regEntry
	for id, list := range c.CPEPrefixes {
		if !seen[id] {
			add("cpe_prefixes: %q is not one of cpes", id)
		}
		if len(list) == 0 {
			add("cpe_prefixes[%s]: empty (omit the CPE instead)", id)
		}
		for i, text := range list {
			pfx, err := netip.ParsePrefix(text)
			if err == nil && pfx != pfx.Masked() {
				err = fmt.Errorf("host bits set (%s)", pfx.Masked())
			}
			if err == nil {
				err = payload.CheckWATAddr(pfx.Addr())
			}
			if err != nil {
				add("cpe_prefixes[%s][%d] %q: %v", id, i, text, err)
				continue
			}
			err = checkRegistryPrefix(pfx)
			if err != nil {
				add("cpe_prefixes[%s][%d] %q: %v", id, i, text, err)
			}
			entries = append(entries, regEntry{id: id, i: i, pfx: pfx, ok: err == nil})
		}
	}
	return append(errs, checkRegistry(entries)...)
}

// Prefixes returns the registry of CPEPrefixes parsed (Validate has
// checked it).
func (c Config) Prefixes() map[string][]netip.Prefix {
	if len(c.CPEPrefixes) == 0 {
		return nil
	}
	out := make(map[string][]netip.Prefix, len(c.CPEPrefixes))
	for id, list := range c.CPEPrefixes {
		for _, text := range list {
			if p, err := netip.ParsePrefix(text); err == nil {
				out[id] = append(out[id], p)
			}
		}
	}
	return out
}
