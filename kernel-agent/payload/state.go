package payload

import (
	"encoding/json"
	"fmt"
	"net/netip"
)

// StateSchema is the value of the "schema" key of a state payload.
const StateSchema = "mcw.state.v2"

// Backend names as they appear in state payloads.
const (
	BackendWRRSysctl     = "wrr-sysctl"
	BackendMPTCPUpstream = "mptcp-upstream"
	// BackendMPTCPShares caps each WAT's egress at its share (mainline).
	BackendMPTCPShares = "mptcp-shares"
	BackendDryRun      = "dry-run"
)

// backends is the vocabulary of backend names, in canonical order (the
// backend enum of mqtt-state.schema.json and mqtt-proxy-state.schema.json),
// with the semantics each applies; dry-run reports what it simulates (the
// WRR kernel's rounds). It is the one list of names in this package: the
// agent's configuration is checked against it, and cmd/mcw-agent's
// constructor table is tested to hold exactly these names.
var backends = [...]struct{ name, semantics string }{
	{BackendWRRSysctl, SemanticsWRR},
	{BackendMPTCPUpstream, SemanticsOnOff},
	{BackendMPTCPShares, SemanticsRateCaps},
	{BackendDryRun, SemanticsWRR},
}

// Backends returns the backend names in canonical order. It returns a fresh
// slice on every call so that callers cannot change the set.
func Backends() []string {
	names := make([]string, len(backends))
	for i, b := range backends {
		names[i] = b.name
	}
	return names
}

// KnownBackend reports whether name is one of Backends.
func KnownBackend(name string) bool {
	_, ok := semanticsOf(name)
	return ok
}

// Roles of an agent.
const (
	RoleCPE   = "cpe"
	RoleProxy = "proxy"
)

// Events a state payload reports.
const (
	EventApplied      = "applied"
	EventRejected     = "rejected"
	EventLeaseExpired = "lease-expired"
	EventLinkDown     = "link-down"
	EventLinkUp       = "link-up"
	EventRestored     = "restored"
	EventStarted      = "started"
)

// knownEvent reports whether e is one of the events (or empty, as in a last will).
func knownEvent(e string) bool {
	switch e {
	case "", EventApplied, EventRejected, EventLeaseExpired, EventLinkDown, EventLinkUp, EventRestored, EventStarted:
		return true
	}
	return false
}

// Capabilities tells the xApp what the agent's backend can express.
type Capabilities struct {
	MaxWeight int  `json:"max_weight"`
	OnOffOnly bool `json:"on_off_only"`
	// DirectionsCoupled: a WAT switched off in one direction is off in
	// both (mainline MPTCP treats a subflow as backup when either end
	// flagged it).
	DirectionsCoupled bool `json:"directions_coupled"`
	// Semantics is how the backend turns weights into a split (one of
	// the Semantics* constants): the xApp sends caps_mbps only to
	// rate-caps backends.
	Semantics string `json:"semantics,omitempty"`
	// MaxClasses is how many traffic classes per direction the backend
	// applies (0..MaxClasses); the agent refuses a message whose
	// direction carries more, and the xApp sends none to an agent at 0.
	MaxClasses int `json:"max_classes,omitempty"`
}

// Semantics a backend reports in capabilities.semantics.
const (
	// SemanticsWRR: the kernel's weighted round robin, weights are rounds.
	SemanticsWRR = "wrr"
	// SemanticsRateCaps: each WAT's egress is capped at its share.
	SemanticsRateCaps = "rate-caps"
	// SemanticsOnOff: a WAT is used or backup; the default scheduler
	// splits between the used ones.
	SemanticsOnOff = "on-off"
)

// semanticsOf returns the semantics backendName applies, and false for a
// name outside the vocabulary.
func semanticsOf(backendName string) (string, bool) {
	for _, b := range backends {
		if b.name == backendName {
			return b.semantics, true
		}
	}
	return "", false
}

// knownSemantics reports whether s may appear in capabilities.semantics
// ("" for an agent older than the key).
func knownSemantics(s string) bool {
	switch s {
	case "", SemanticsWRR, SemanticsRateCaps, SemanticsOnOff:
		return true
	}
	return false
}

// CapabilitiesOf returns a backend's capabilities as reported: on mainline
// (mptcp-upstream) the directions are coupled whatever the backend says,
// because the default scheduler checks both ends' backup flags (Linux
// 6.11, "mptcp: sched: check both directions for backup"; measured in
// integration.TestNetnsDirectionsCoupled).
//
// A backend that leaves Semantics empty gets its name's (see backends).
func CapabilitiesOf(backendName string, c Capabilities) Capabilities {
	if backendName == BackendMPTCPUpstream {
		c.DirectionsCoupled = true
	}
	if c.Semantics == "" {
		c.Semantics, _ = semanticsOf(backendName)
	}
	return c
}

// State is an agent's retained report for one CPE: a CPE agent's on
// mcw/v1/s/{shard}/cpe/{cpe_id}/state (role cpe, direction ul, with the addresses of
// its WATs), a proxy's per served CPE on
// mcw/v1/s/{shard}/proxy/{proxy_id}/cpe/{cpe_id}/state (role proxy, direction dl).
// The last will is the same object with only schema, cpe_id and
// online=false, which Offline builds.
type State struct {
	Schema         string  `json:"schema"`
	CPEID          string  `json:"cpe_id"`
	Online         bool    `json:"online"`
	Role           string  `json:"role,omitempty"`
	ProxyID        string  `json:"proxy_id,omitempty"`
	Direction      string  `json:"direction,omitempty"`
	TimeMs         int64   `json:"time_ms"`
	AppliedVersion int64   `json:"applied_version"`
	AppliedWeights Weights `json:"applied_weights"`
	// AppliedCapsMbps: with semantics rate-caps, the egress cap set per
	// WAT (a WAT absent is uncapped).
	AppliedCapsMbps map[string]float64 `json:"applied_caps_mbps,omitempty"`
	// AppliedClasses: what the backend set per traffic class of the
	// applied version, by class name (absent: no classes).
	AppliedClasses map[string]AppliedClass `json:"applied_classes,omitempty"`
	Addresses      map[string]string       `json:"addresses,omitempty"`
	Backend        string                  `json:"backend,omitempty"`
	Capabilities   *Capabilities           `json:"capabilities,omitempty"`
	Links          map[string]string       `json:"links"`
	Event          string                  `json:"event,omitempty"`
	// Alarm is a standing condition the operator must resolve (role
	// proxy: AlarmAddressConflict); empty when none.
	Alarm     string `json:"alarm,omitempty"`
	LastError string `json:"last_error"`
}

// AppliedClass is what a backend set for one traffic class: its egress
// ceiling in Mbit/s per WAT (its own cap, the WAT's cap it borrows up
// to, or MinCapMbps on a WAT it does not use; a WAT absent is unlimited)
// and whether its packets leave each WAT's queue first.
type AppliedClass struct {
	CapsMbps map[string]float64 `json:"caps_mbps,omitempty"`
	Urgent   bool               `json:"urgent,omitempty"`
}

// Marshal encodes s with its schema set.
func (s State) Marshal() ([]byte, error) {
	s.Schema = StateSchema
	if s.AppliedWeights == nil {
		s.AppliedWeights = Weights{}
	}
	if s.Links == nil {
		s.Links = map[string]string{}
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("marshal state: %w", err)
	}
	return b, nil
}

// Offline returns the last-will payload for cpeID.
func Offline(cpeID string) []byte {
	b, _ := json.Marshal(struct {
		Schema string `json:"schema"`
		CPEID  string `json:"cpe_id"`
		Online bool   `json:"online"`
	}{StateSchema, cpeID, false})
	return b
}

// MaxErrorLen bounds last_error (characters of the schema; the agents cut
// their own at this many bytes).
const MaxErrorLen = 1024

// ParseState decodes and validates a state payload: the proxy reads the
// CPE agents' (their WAT addresses and links) and tests and tools read
// both roles'. Every key is checked against mqtt-state.schema.json: schema,
// cpe_id and online required, enums, ranges, WAT keys, addresses that
// parse as IP addresses. An mcw.state.v1 payload is refused.
func ParseState(data []byte) (State, error) {
	// The schema requires schema, cpe_id and online. A missing schema or
	// cpe_id fails its check below as an empty one would; online false is
	// a valid report (an offline CPE), so the key's presence is read into
	// a pointer that shadows State's field (encoding/json fills the
	// shallower of two fields with one name).
	type received struct {
		State
		Online *bool `json:"online"`
	}
	var w received
	if err := decodeStrict(data, &w); err != nil {
		return State{}, err
	}
	if w.Schema != StateSchema {
		return State{}, fmt.Errorf("%w: schema: want %q", ErrInvalid, StateSchema)
	}
	if !ValidCPEID(w.CPEID) {
		return State{}, fmt.Errorf("%w: cpe_id: missing or not an identifier", ErrInvalid)
	}
	if w.Online == nil {
		return State{}, fmt.Errorf("%w: online: missing", ErrInvalid)
	}
	switch {
	case w.Role != "" && w.Role != RoleCPE && w.Role != RoleProxy:
		return State{}, fmt.Errorf("%w: role %q: want cpe or proxy", ErrInvalid, w.Role)
	case w.ProxyID != "" && !ValidCPEID(w.ProxyID):
		return State{}, fmt.Errorf("%w: proxy_id: not an identifier", ErrInvalid)
	case w.Direction != "" && w.Direction != DL && w.Direction != UL:
		return State{}, fmt.Errorf("%w: direction %q: want dl or ul", ErrInvalid, w.Direction)
	case w.TimeMs < 0 || w.TimeMs > maxSafeInt || w.AppliedVersion < 0 || w.AppliedVersion > maxSafeInt:
		return State{}, fmt.Errorf("%w: time_ms %d, applied_version %d: want [0, 2^53-1]", ErrInvalid, w.TimeMs, w.AppliedVersion)
	case w.Backend != "" && !KnownBackend(w.Backend):
		return State{}, fmt.Errorf("%w: backend %q: unknown", ErrInvalid, w.Backend)
	case !knownEvent(w.Event):
		return State{}, fmt.Errorf("%w: event %q: unknown", ErrInvalid, w.Event)
	case w.Alarm != "" && w.Alarm != AlarmAddressConflict:
		return State{}, fmt.Errorf("%w: alarm %q: unknown", ErrInvalid, w.Alarm)
	case len([]rune(w.LastError)) > MaxErrorLen:
		return State{}, fmt.Errorf("%w: last_error: longer than %d characters", ErrInvalid, MaxErrorLen)
	}
	if c := w.Capabilities; c != nil && (c.MaxWeight < 1 || c.MaxWeight > MaxWeight) {
		return State{}, fmt.Errorf("%w: capabilities.max_weight %d: want 1..%d", ErrInvalid, c.MaxWeight, MaxWeight)
	}
	if c := w.Capabilities; c != nil && !knownSemantics(c.Semantics) {
		return State{}, fmt.Errorf("%w: capabilities.semantics %q: want wrr, rate-caps or on-off", ErrInvalid, c.Semantics)
	}
	if c := w.Capabilities; c != nil && (c.MaxClasses < 0 || c.MaxClasses > MaxClasses) {
		return State{}, fmt.Errorf("%w: capabilities.max_classes %d: want 0..%d", ErrInvalid, c.MaxClasses, MaxClasses)
	}
	if err := checkCaps("applied_caps_mbps", w.AppliedCapsMbps); err != nil {
		return State{}, err
	}
	if len(w.AppliedClasses) > MaxClasses {
		return State{}, fmt.Errorf("%w: applied_classes: %d classes, at most %d", ErrInvalid, len(w.AppliedClasses), MaxClasses)
	}
	for name, c := range w.AppliedClasses {
		if !ValidClassName(name) {
			return State{}, fmt.Errorf("%w: applied_classes: %q is not a class name", ErrInvalid, name)
		}
		if err := checkCaps("applied_classes."+name+".caps_mbps", c.CapsMbps); err != nil {
			return State{}, err
		}
	}
	for k, v := range w.AppliedWeights {
		if !KnownWAT(k) || v < 0 || v > MaxWeight {
			return State{}, fmt.Errorf("%w: applied_weights: %s=%d", ErrInvalid, k, v)
		}
	}
	for k, v := range w.Links {
		if !KnownWAT(k) || (v != "up" && v != "down") {
			return State{}, fmt.Errorf("%w: links: %s=%q", ErrInvalid, k, v)
		}
	}
	for k, v := range w.Addresses {
		if !KnownWAT(k) {
			return State{}, fmt.Errorf("%w: addresses: unknown WAT %q", ErrInvalid, k)
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return State{}, fmt.Errorf("%w: addresses: %s=%q is not an IP address", ErrInvalid, k, v)
		}
		if err := CheckWATAddr(a); err != nil {
			return State{}, fmt.Errorf("addresses: %s: %w", k, err)
		}
	}
	s := w.State
	s.Online = *w.Online
	return s, nil
}

// ParsedAddresses returns s.Addresses as netip addresses (ParseState has
// checked them; an unparsable one is left out).
func (s State) ParsedAddresses() map[string]netip.Addr {
	out := make(map[string]netip.Addr, len(s.Addresses))
	for k, v := range s.Addresses {
		if a, err := netip.ParseAddr(v); err == nil {
			out[k] = a
		}
	}
	return out
}

// ProxyStateSchema is the value of the "schema" key of a proxy's own state.
const ProxyStateSchema = "mcw.proxy-state.v1"

// Rules counts the kernel rules a proxy wrote for all its CPEs.
type Rules struct {
	Used         int `json:"used"`
	Limit        int `json:"limit"`
	OverflowCPEs int `json:"overflow_cpes"`
}

// ProxyState is a proxy agent's retained report on
// mcw/v1/proxy/{proxy_id}/state; its last will is ProxyOffline.
type ProxyState struct {
	Schema       string       `json:"schema"`
	ProxyID      string       `json:"proxy_id"`
	Online       bool         `json:"online"`
	TimeMs       int64        `json:"time_ms"`
	Backend      string       `json:"backend"`
	Capabilities Capabilities `json:"capabilities"`
	CPEs         int          `json:"cpes"`
	CPEsApplied  int          `json:"cpes_applied"`
	Rules        Rules        `json:"rules"`
	LastError    string       `json:"last_error"`
}

// Marshal encodes p with its schema set.
func (p ProxyState) Marshal() ([]byte, error) {
	p.Schema = ProxyStateSchema
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("marshal proxy state: %w", err)
	}
	return b, nil
}

// ProxyOffline returns the proxy's last-will payload.
func ProxyOffline(proxyID string) []byte {
	b, _ := json.Marshal(struct {
		Schema  string `json:"schema"`
		ProxyID string `json:"proxy_id"`
		Online  bool   `json:"online"`
	}{ProxyStateSchema, proxyID, false})
	return b
}

// ParseProxyState decodes a proxy's state (tests and tools), refusing
// unknown keys and another schema.
func ParseProxyState(data []byte) (ProxyState, error) {
	var p ProxyState
	if err := decodeStrict(data, &p); err != nil {
		return ProxyState{}, err
	}
	if p.Schema != ProxyStateSchema {
		return ProxyState{}, fmt.Errorf("%w: schema: want %q", ErrInvalid, ProxyStateSchema)
	}
	if !ValidCPEID(p.ProxyID) {
		return ProxyState{}, fmt.Errorf("%w: proxy_id: missing or not an identifier", ErrInvalid)
	}
	if !knownSemantics(p.Capabilities.Semantics) {
		return ProxyState{}, fmt.Errorf("%w: capabilities.semantics %q: want wrr, rate-caps or on-off", ErrInvalid, p.Capabilities.Semantics)
	}
	if c := p.Capabilities.MaxClasses; c < 0 || c > MaxClasses {
		return ProxyState{}, fmt.Errorf("%w: capabilities.max_classes %d: want 0..%d", ErrInvalid, c, MaxClasses)
	}
	if p.CPEs < 0 || p.CPEsApplied < 0 || p.Rules.Used < 0 || p.Rules.Limit < 0 || p.Rules.OverflowCPEs < 0 || p.TimeMs < 0 {
		return ProxyState{}, fmt.Errorf("%w: negative count", ErrInvalid)
	}
	return p, nil
}
