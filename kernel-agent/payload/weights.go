package payload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strings"
)

// WeightsSchema is the value of the "schema" key of a weights payload.
const WeightsSchema = "mcw.weights.v2"

// WeightsSchemaV1 is the schema of the single-set payload of earlier xApps;
// it is refused with an error that names it, so an operator halfway through
// an upgrade sees why the agent runs on its safe weights.
const WeightsSchemaV1 = "mcw.weights.v1"

// Directions of a weights payload: the proxy applies dl, the CPE applies ul
// (an MPTCP scheduler decides at the sender).
const (
	DL = "dl"
	UL = "ul"
)

// Limits of a weights payload; they match schemas/mqtt-weights.schema.json.
const (
	// MaxPayloadBytes bounds every payload the agent reads: the broker's
	// max_packet_size (broker/mosquitto.conf), which no message it
	// delivers passes. Weights without classes are a few hundred bytes,
	// with eight classes a side a few KiB.
	MaxPayloadBytes = 16384
	// MaxDepth bounds the nesting of objects and arrays in a payload; the
	// deepest schema (weights: a port range of a class's match) nests 7
	// levels.
	MaxDepth = 7
	// MinLeaseSeconds and MaxLeaseSeconds bound lease_s.
	MinLeaseSeconds = 1
	MaxLeaseSeconds = 3600
	// MaxReasonLen bounds the free-text reason (characters).
	MaxReasonLen = 256
	// MaxCapMbps bounds a cap in caps_mbps and applied_caps_mbps (the
	// schemas' maximum: 100 Gbit/s).
	MaxCapMbps = 100_000
	// MinCapMbps bounds a cap in caps_mbps from below: 64 kbit/s, the
	// shares backend's floor (the xApp clips its caps to it).
	MinCapMbps = 0.064
	// maxSafeInt is the largest integer a JSON number carries exactly in
	// every implementation (2^53 - 1), the bound for version and times.
	maxSafeInt = 1<<53 - 1
)

// KnownMode reports whether mode is a steering mode a weights payload may
// carry (3GPP ATSSS spirit), for a direction or a class; the agent does not
// act on the mode (the xApp turned it into weights and caps), it records it.
func KnownMode(mode string) bool {
	switch mode {
	case "load_balancing", "fixed_split", "active_standby", "latency_bound", "priority", "smallest_delay":
		return true
	}
	return false
}

// ErrInvalid is wrapped by every validation error of Parse* functions, so
// callers can tell "the sender sent garbage" from other failures with
// errors.Is.
var ErrInvalid = errors.New("invalid payload")

// Weights maps a WAT name to its weight in [0, MaxWeight].
type Weights map[WAT]int

// Clone returns a copy of w.
func (w Weights) Clone() Weights {
	c := make(Weights, len(w))
	for k, v := range w {
		c[k] = v
	}
	return c
}

// Equal reports whether w and o hold the same weights; a missing key equals 0.
func (w Weights) Equal(o Weights) bool {
	for k, v := range w {
		if o[k] != v {
			return false
		}
	}
	for k, v := range o {
		if w[k] != v {
			return false
		}
	}
	return true
}

// AllZero reports whether no WAT has a positive weight.
func (w Weights) AllZero() bool {
	for _, v := range w {
		if v > 0 {
			return false
		}
	}
	return true
}

// String formats w in canonical WAT order, e.g. "nr=30 wifi=100".
func (w Weights) String() string {
	keys := make([]string, 0, len(w))
	for k := range w {
		keys = append(keys, k)
	}
	order := map[string]int{NR: 0, LTE: 1, WiFi: 2, LiFi: 3}
	sort.Slice(keys, func(i, j int) bool {
		oi, iok := order[keys[i]]
		oj, jok := order[keys[j]]
		if iok && jok {
			return oi < oj
		}
		if iok != jok {
			return iok
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, w[k])
	}
	return b.String()
}

// Validate checks that w has only known WATs, weights in [0, MaxWeight] and
// at least one positive weight: the rule for anything the agent applies.
func (w Weights) Validate() error {
	if len(w) == 0 {
		return fmt.Errorf("%w: weights: empty", ErrInvalid)
	}
	for k, v := range w {
		if !KnownWAT(k) {
			return fmt.Errorf("%w: weights: unknown WAT %q", ErrInvalid, k)
		}
		if v < 0 || v > MaxWeight {
			return fmt.Errorf("%w: weights: %s=%d outside [0, %d]", ErrInvalid, k, v, MaxWeight)
		}
	}
	if w.AllZero() {
		return fmt.Errorf("%w: weights: all zero", ErrInvalid)
	}
	return nil
}

// DirWeights is one direction's set of a weights payload.
type DirWeights struct {
	Mode    string
	Reason  string
	Weights Weights
	// CapsMbps is the xApp's per-WAT rate cap in Mbit/s for rate-caps
	// backends (share x forecast total x headroom); nil when the message
	// has none. Every value is in (0, MaxCapMbps].
	CapsMbps map[WAT]float64
	// Classes are the direction's traffic classes in the order a packet
	// meets them (ValidateClasses holds); nil when the message has none:
	// the weights above then steer all traffic, as they steer the traffic
	// no class takes.
	Classes []Class
}

// WeightsUpdate is a validated weights payload: one version, issue time and
// lease for both directions' sets.
type WeightsUpdate struct {
	CPEID      string
	Version    int64
	IssuedAtMs int64
	LeaseS     float64
	DL, UL     DirWeights
}

// Dir returns the set of direction dir: DL's for DL, UL's otherwise.
func (u WeightsUpdate) Dir(dir string) DirWeights {
	if dir == DL {
		return u.DL
	}
	return u.UL
}

// wireWeights mirrors the JSON object; pointers tell a missing key from a
// zero value, json.Number keeps integer checks exact.
type wireWeights struct {
	Schema     *string  `json:"schema"`
	CPEID      *string  `json:"cpe_id"`
	Version    *number  `json:"version"`
	IssuedAtMs *number  `json:"issued_at_ms"`
	LeaseS     *number  `json:"lease_s"`
	DL         *wireDir `json:"dl"`
	UL         *wireDir `json:"ul"`
}

type wireDir struct {
	Mode    *string           `json:"mode"`
	Reason  *string           `json:"reason"`
	Weights map[string]number `json:"weights"`
	Caps    map[string]number `json:"caps_mbps"`
	Classes []wireClass       `json:"classes"`
}

// number is a JSON number kept as its literal text. Unlike json.Number it
// refuses quoted strings ("42") and null, as the JSON Schema "number" and
// "integer" types do.
type number struct{ json.Number }

// UnmarshalJSON accepts only a bare JSON number literal.
func (n *number) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || !(b[0] == '-' || (b[0] >= '0' && b[0] <= '9')) {
		return fmt.Errorf("not a number: %.20s", b)
	}
	n.Number = json.Number(b)
	return nil
}

// ParseWeights decodes and validates a weights payload addressed to cpeID.
// Unknown keys, missing keys (either direction included), non-integer
// versions or weights, weights out of range, a direction whose weights are
// all zero and a cpe_id other than cpeID are rejected with an error wrapping
// ErrInvalid; so is an mcw.weights.v1 payload, with an error that names it.
// ParseWeights is safe for concurrent use.
func ParseWeights(data []byte, cpeID string) (WeightsUpdate, error) {
	var w wireWeights
	if err := decodeStrict(data, &w); err != nil {
		if schemaOf(data) == WeightsSchemaV1 {
			return WeightsUpdate{}, errV1()
		}
		return WeightsUpdate{}, err
	}
	if w.Schema != nil && *w.Schema == WeightsSchemaV1 {
		return WeightsUpdate{}, errV1()
	}
	if w.Schema == nil || *w.Schema != WeightsSchema {
		return WeightsUpdate{}, fmt.Errorf("%w: schema: want %q", ErrInvalid, WeightsSchema)
	}
	if w.CPEID == nil {
		return WeightsUpdate{}, fmt.Errorf("%w: cpe_id: missing", ErrInvalid)
	}
	if *w.CPEID != cpeID {
		return WeightsUpdate{}, fmt.Errorf("%w: cpe_id: %q is not this CPE (%q)", ErrInvalid, *w.CPEID, cpeID)
	}
	version, err := intField("version", w.Version, 1)
	if err != nil {
		return WeightsUpdate{}, err
	}
	issued, err := intField("issued_at_ms", w.IssuedAtMs, 0)
	if err != nil {
		return WeightsUpdate{}, err
	}
	if w.LeaseS == nil {
		return WeightsUpdate{}, fmt.Errorf("%w: lease_s: missing", ErrInvalid)
	}
	lease, err := w.LeaseS.Float64()
	if err != nil || math.IsNaN(lease) || lease < MinLeaseSeconds || lease > MaxLeaseSeconds {
		return WeightsUpdate{}, fmt.Errorf("%w: lease_s: %s outside [%d, %d]", ErrInvalid, w.LeaseS.String(), MinLeaseSeconds, MaxLeaseSeconds)
	}
	dl, err := parseDir(DL, w.DL)
	if err != nil {
		return WeightsUpdate{}, err
	}
	ul, err := parseDir(UL, w.UL)
	if err != nil {
		return WeightsUpdate{}, err
	}
	return WeightsUpdate{CPEID: *w.CPEID, Version: version, IssuedAtMs: issued, LeaseS: lease, DL: dl, UL: ul}, nil
}

func errV1() error {
	return fmt.Errorf("%w: schema: %s is not accepted by this agent: upgrade the xApp (this agent speaks %s)",
		ErrInvalid, WeightsSchemaV1, WeightsSchema)
}

// schemaOf returns the top-level "schema" string of data, or "" when data
// has none; it is only used to explain a refusal, after the size and depth
// checks of decodeStrict have passed or failed.
func schemaOf(data []byte) string {
	if len(data) > MaxPayloadBytes || depth(data) > MaxDepth {
		return ""
	}
	var v struct {
		Schema string `json:"schema"`
	}
	if json.Unmarshal(data, &v) != nil {
		return ""
	}
	return v.Schema
}

// parseDir validates one direction's object.
func parseDir(name string, d *wireDir) (DirWeights, error) {
	if d == nil {
		return DirWeights{}, fmt.Errorf("%w: %s: missing", ErrInvalid, name)
	}
	if d.Mode == nil || !KnownMode(*d.Mode) {
		return DirWeights{}, fmt.Errorf("%w: %s.mode: missing or unknown", ErrInvalid, name)
	}
	var reason string // optional
	if d.Reason != nil {
		reason = *d.Reason
	}
	if n := len([]rune(reason)); n > MaxReasonLen {
		return DirWeights{}, fmt.Errorf("%w: %s.reason: %d characters, at most %d", ErrInvalid, name, n, MaxReasonLen)
	}
	if d.Weights == nil {
		return DirWeights{}, fmt.Errorf("%w: %s.weights: missing", ErrInvalid, name)
	}
	weights, err := parseWeightsMap(name, d.Weights)
	if err != nil {
		return DirWeights{}, err
	}
	if d.Caps != nil && len(d.Caps) == 0 {
		return DirWeights{}, fmt.Errorf("%w: %s.caps_mbps: empty (omit the key instead)", ErrInvalid, name)
	}
	caps, err := parseCaps(name+".caps_mbps", d.Caps)
	if err != nil {
		return DirWeights{}, err
	}
	// A WAT at weight 0 is off, not capped; a cap below the backends'
	// resolution would be a cap of another size.
	if err := checkWeightsCaps(name, weights, caps); err != nil {
		return DirWeights{}, err
	}
	classes, err := parseClasses(name, d.Classes)
	if err != nil {
		return DirWeights{}, err
	}
	if err := ValidateClasses(name, classes); err != nil {
		return DirWeights{}, err
	}
	return DirWeights{Mode: *d.Mode, Reason: reason, Weights: weights, CapsMbps: caps, Classes: classes}, nil
}

// parseWeightsMap reads a set's weights: known WATs, integers in
// [0, MaxWeight] (Weights.Validate, by checkWeightsCaps, refuses a set
// that is all zero).
func parseWeightsMap(name string, in map[string]number) (Weights, error) {
	weights := make(Weights, len(in))
	for k, v := range in {
		if !KnownWAT(k) {
			return nil, fmt.Errorf("%w: %s.weights: unknown WAT %q", ErrInvalid, name, k)
		}
		n, err := v.Int64()
		if err != nil || n < 0 || n > MaxWeight {
			return nil, fmt.Errorf("%w: %s.weights: %s=%s is not an integer in [0, %d]", ErrInvalid, name, k, v.String(), MaxWeight)
		}
		weights[k] = int(n)
	}
	return weights, nil
}

// parseCaps reads a per-WAT cap object and checks it (checkCaps). A nil
// object gives nil.
func parseCaps(name string, in map[string]number) (map[WAT]float64, error) {
	if in == nil {
		return nil, nil
	}
	caps := make(map[WAT]float64, len(in))
	for k, v := range in {
		f, err := v.Float64()
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %s=%s is not a number in (0, %d]", ErrInvalid, name, k, v.String(), MaxCapMbps)
		}
		caps[k] = f
	}
	return caps, checkCaps(name, caps)
}

// checkCaps checks per-WAT caps: known WATs, finite numbers in
// (0, MaxCapMbps].
func checkCaps(name string, caps map[WAT]float64) error {
	for k, f := range caps {
		if !KnownWAT(k) {
			return fmt.Errorf("%w: %s: unknown WAT %q", ErrInvalid, name, k)
		}
		if math.IsNaN(f) || !(f > 0) || f > MaxCapMbps {
			return fmt.Errorf("%w: %s: %s=%g is not a number in (0, %d]", ErrInvalid, name, k, f, MaxCapMbps)
		}
	}
	return nil
}

// ValidCPEID reports whether id can be a CPE identifier: it is also the CN
// of the CPE's certificate and a topic level, so no MQTT wildcard or level
// separator (pattern ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$ of the schemas).
func ValidCPEID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i, c := range id {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '.' && c != '_' && c != '-')) {
			return false
		}
	}
	return true
}

// decodeStrict decodes exactly one JSON object into v, refusing unknown keys,
// keys in another case, duplicate keys, null, trailing data, oversized and
// too deeply nested input; size and depth are checked before the decoder
// runs.
func decodeStrict(data []byte, v any) error {
	if len(data) > MaxPayloadBytes {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalid, len(data), MaxPayloadBytes)
	}
	if d := depth(data); d > MaxDepth {
		return fmt.Errorf("%w: nested %d levels deep, at most %d", ErrInvalid, d, MaxDepth)
	}
	if err := checkKeys(data, fieldNames(reflect.TypeOf(v))); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: trailing data after the JSON object", ErrInvalid)
	}
	return nil
}

// depth returns the deepest nesting of objects and arrays in data, skipping
// strings; it does not validate (the decoder does).
func depth(data []byte) int {
	d, deepest, inString, escaped := 0, 0, false, false
	for _, c := range data {
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			d++
			deepest = max(deepest, d)
		case c == '}' || c == ']':
			d--
		}
	}
	return deepest
}

// intField checks that n is present and an integer in [min, 2^53-1].
func intField(name string, n *number, min int64) (int64, error) {
	if n == nil {
		return 0, fmt.Errorf("%w: %s: missing", ErrInvalid, name)
	}
	v, err := n.Int64()
	if err != nil || v < min || v > maxSafeInt {
		return 0, fmt.Errorf("%w: %s: %s is not an integer in [%d, 2^53-1]", ErrInvalid, name, n.String(), min)
	}
	return v, nil
}
