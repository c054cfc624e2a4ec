package payload

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The agent's payloads are checked against the JSON schemas the xApp
// validates them with (schemas/mqtt-*.schema.json). validate implements
// the part of JSON Schema 2020-12 those files use (type, const, enum,
// required, properties, additionalProperties (false or a schema),
// minProperties, maxProperties, propertyNames, items, minItems, maxItems,
// uniqueItems, anyOf, minimum, exclusiveMinimum, maximum, minLength,
// maxLength, pattern, local $ref); a keyword
// outside that set fails the test, so a schema growing a new keyword
// cannot pass unchecked.

func loadSchema(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "schemas", name))
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

var knownKeywords = []string{"$schema", "$id", "$defs", "$ref", "title", "description", "type", "const", "enum",
	"required", "properties", "additionalProperties", "minProperties", "maxProperties", "propertyNames", "items",
	"minItems", "maxItems", "uniqueItems", "anyOf", "minimum", "exclusiveMinimum", "maximum", "minLength", "maxLength", "pattern"}

func validate(root, s map[string]any, v any, path string) error {
	for k := range s {
		if !slices.Contains(knownKeywords, k) {
			return fmt.Errorf("%s: schema keyword %q not supported by this test's validator", path, k)
		}
	}
	if ref, ok := s["$ref"].(string); ok {
		name, found := strings.CutPrefix(ref, "#/$defs/")
		if !found {
			return fmt.Errorf("%s: $ref %q not local", path, ref)
		}
		def, _ := root["$defs"].(map[string]any)[name].(map[string]any)
		if def == nil {
			return fmt.Errorf("%s: $ref %q not found", path, ref)
		}
		if err := validate(root, def, v, path); err != nil {
			return err
		}
	}
	if c, ok := s["const"]; ok && c != v {
		return fmt.Errorf("%s: %v is not the constant %v", path, v, c)
	}
	if e, ok := s["enum"].([]any); ok && !slices.Contains(e, v) {
		return fmt.Errorf("%s: %v not in %v", path, v, e)
	}
	if ty, ok := s["type"].(string); ok {
		okType := false
		switch x := v.(type) {
		case map[string]any:
			okType = ty == "object"
		case string:
			okType = ty == "string"
		case bool:
			okType = ty == "boolean"
		case []any:
			okType = ty == "array"
		case float64:
			okType = ty == "number" || (ty == "integer" && x == math.Trunc(x))
		}
		if !okType {
			return fmt.Errorf("%s: %v is not of type %s", path, v, ty)
		}
	}
	if n, ok := v.(float64); ok {
		if lo, ok := s["minimum"].(float64); ok && n < lo {
			return fmt.Errorf("%s: %v < %v", path, n, lo)
		}
		if lo, ok := s["exclusiveMinimum"].(float64); ok && n <= lo {
			return fmt.Errorf("%s: %v <= %v", path, n, lo)
		}
		if hi, ok := s["maximum"].(float64); ok && n > hi {
			return fmt.Errorf("%s: %v > %v", path, n, hi)
		}
	}
	if str, ok := v.(string); ok {
		n := float64(len([]rune(str)))
		if lo, ok := s["minLength"].(float64); ok && n < lo {
			return fmt.Errorf("%s: %q shorter than %v", path, str, lo)
		}
		if hi, ok := s["maxLength"].(float64); ok && n > hi {
			return fmt.Errorf("%s: %q longer than %v", path, str, hi)
		}
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
			return fmt.Errorf("%s: %q does not match %s", path, str, p)
		}
	}
	if obj, ok := v.(map[string]any); ok {
		props, _ := s["properties"].(map[string]any)
		for _, r := range asSlice(s["required"]) {
			if _, ok := obj[r.(string)]; !ok {
				return fmt.Errorf("%s: %q required", path, r)
			}
		}
		if lo, ok := s["minProperties"].(float64); ok && float64(len(obj)) < lo {
			return fmt.Errorf("%s: fewer than %v properties", path, lo)
		}
		if hi, ok := s["maxProperties"].(float64); ok && float64(len(obj)) > hi {
			return fmt.Errorf("%s: more than %v properties", path, hi)
		}
		for k, val := range obj {
			if pn, ok := s["propertyNames"].(map[string]any); ok {
				if err := validate(root, pn, k, path+".<name>"); err != nil {
					return err
				}
			}
			ps, known := props[k].(map[string]any)
			if !known {
				switch ap := s["additionalProperties"].(type) {
				case bool:
					if !ap {
						return fmt.Errorf("%s: property %q not allowed", path, k)
					}
				case map[string]any:
					if err := validate(root, ap, val, path+"."+k); err != nil {
						return err
					}
				}
				continue
			}
			if err := validate(root, ps, val, path+"."+k); err != nil {
				return err
			}
		}
	}
	if arr, ok := v.([]any); ok {
		if lo, ok := s["minItems"].(float64); ok && float64(len(arr)) < lo {
			return fmt.Errorf("%s: fewer than %v items", path, lo)
		}
		if hi, ok := s["maxItems"].(float64); ok && float64(len(arr)) > hi {
			return fmt.Errorf("%s: more than %v items", path, hi)
		}
		for i, x := range arr {
			if u, _ := s["uniqueItems"].(bool); u {
				for _, y := range arr[:i] {
					if fmt.Sprint(x) == fmt.Sprint(y) {
						return fmt.Errorf("%s: %v twice", path, x)
					}
				}
			}
			if it, ok := s["items"].(map[string]any); ok {
				if err := validate(root, it, x, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	}
	if alts, ok := s["anyOf"].([]any); ok {
		var errs []string
		for _, alt := range alts {
			err := validate(root, alt.(map[string]any), v, path)
			if err == nil {
				errs = nil
				break
			}
			errs = append(errs, err.Error())
		}
		if errs != nil {
			return fmt.Errorf("%s: no alternative of anyOf matches: %s", path, strings.Join(errs, "; "))
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

func asSlice(v any) []any { s, _ := v.([]any); return s }

func checkSchema(t *testing.T, schema string, doc []byte) {
	t.Helper()
	root := loadSchema(t, schema)
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatal(err)
	}
	if err := validate(root, root, v, "$"); err != nil {
		t.Errorf("%s: %v\n%s", schema, err, doc)
	}
}

func must(t *testing.T) func([]byte, error) []byte {
	return func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// TestPayloadsMatchSchemas checks what the agent publishes in both roles,
// and what it accepts, against the schemas.
func TestPayloadsMatchSchemas(t *testing.T) {
	m := must(t)
	sat, rate, retrans := 0.5, 12.5, 3.25
	n := func(v int64) *int64 { return &v }
	caps := CapabilitiesOf(BackendMPTCPUpstream, Capabilities{MaxWeight: 1, OnOffOnly: true})
	if !caps.DirectionsCoupled {
		t.Fatal("mptcp-upstream must report directions_coupled")
	}
	for name, c := range map[string]struct {
		schema string
		doc    []byte
	}{
		"cpe state": {"mqtt-state.schema.json", m(State{CPEID: "cpe-0001", Online: true, Role: RoleCPE, Direction: UL, TimeMs: 1,
			AppliedVersion: 3, AppliedWeights: Weights{NR: 1, WiFi: 0}, Addresses: map[string]string{NR: "10.31.1.2", WiFi: "fd00::2"},
			Backend: BackendMPTCPUpstream, Capabilities: &caps, Links: map[string]string{NR: "up", WiFi: "down"},
			Event: EventLinkDown, LastError: ""}.Marshal())},
		"proxy per-CPE state": {"mqtt-state.schema.json", m(State{CPEID: "cpe-0001", Online: true, Role: RoleProxy, ProxyID: "proxy-0001",
			Direction: DL, TimeMs: 1, AppliedWeights: Weights{}, Backend: BackendDryRun, Capabilities: &Capabilities{MaxWeight: 255},
			Event: EventStarted, LastError: "no WAT address"}.Marshal())},
		"cpe state rate-caps": {"mqtt-state.schema.json", m(State{CPEID: "cpe-0001", Online: true, Role: RoleCPE, Direction: UL, TimeMs: 1,
			AppliedVersion: 4, AppliedWeights: Weights{NR: 7, WiFi: 3, LiFi: 0}, AppliedCapsMbps: map[string]float64{WiFi: 8.57},
			Backend: BackendMPTCPShares, Capabilities: ptr(CapabilitiesOf(BackendMPTCPShares, Capabilities{MaxWeight: 255, DirectionsCoupled: true})),
			Links: map[string]string{NR: "up", WiFi: "up", LiFi: "up"}, Event: EventApplied}.Marshal())},
		"proxy per-CPE state rate-caps": {"mqtt-state.schema.json", m(State{CPEID: "cpe-0001", Online: true, Role: RoleProxy, ProxyID: "proxy-0001",
			Direction: DL, TimeMs: 1, AppliedVersion: 2, AppliedWeights: Weights{NR: 70, WiFi: 30}, AppliedCapsMbps: map[string]float64{NR: 14, WiFi: 6},
			Backend: BackendMPTCPShares, Capabilities: ptr(CapabilitiesOf(BackendMPTCPShares, Capabilities{MaxWeight: 255}))}.Marshal())},
		"cpe will":    {"mqtt-state.schema.json", Offline("cpe-0001")},
		"proxy state": {"mqtt-proxy-state.schema.json", m(ProxyState{ProxyID: "proxy-0001", Online: true, TimeMs: 1, Backend: BackendWRRSysctl, Capabilities: Capabilities{MaxWeight: 255}, CPEs: 3, CPEsApplied: 2, Rules: Rules{Used: 6, Limit: 256, OverflowCPEs: 1}}.Marshal())},
		"proxy will":  {"mqtt-proxy-state.schema.json", ProxyOffline("proxy-0001")},
		"proxy state rate-caps": {"mqtt-proxy-state.schema.json", m(ProxyState{ProxyID: "proxy-0001", Online: true, TimeMs: 1, Backend: BackendMPTCPShares,
			Capabilities: CapabilitiesOf(BackendMPTCPShares, Capabilities{MaxWeight: 255, DirectionsCoupled: true}), CPEs: 1, CPEsApplied: 1}.Marshal())},
		"cpe telemetry": {"mqtt-telemetry.schema.json", m(Telemetry{CPEID: "cpe-0001", TimeMs: 1, IntervalMs: 1000, WATs: map[string]WATTelemetry{
			NR: {Up: true, Subflows: 1, RTTMs: 3.5, UL: &DirTelemetry{DeliveredMbps: 1, BytesAcked: n(5), Cwnd: n(10), Saturated: &sat, DeliveryRateMbps: &rate, RetransPct: &retrans},
				DL: &DirTelemetry{DeliveredMbps: 2, BytesReceived: n(7)}}}}.Marshal())},
		"proxy telemetry": {"mqtt-telemetry.schema.json", m(Telemetry{CPEID: "cpe-0001", ProxyID: "proxy-0001", TimeMs: 1, IntervalMs: 1000, WATs: map[string]WATTelemetry{
			LiFi: {DL: &DirTelemetry{DeliveredMbps: 1, BytesAcked: n(5), Cwnd: n(10), RetransPct: &retrans}}}}.Marshal())},
		"weights the agent accepts":    {"mqtt-weights.schema.json", []byte(validWeights)},
		"weights with caps it accepts": {"mqtt-weights.schema.json", []byte(validWeightsCaps)},
		"telemetry golden file":        {"mqtt-telemetry.schema.json", m(os.ReadFile("../telemetry/testdata/telemetry.golden.json"))},
	} {
		t.Run(name, func(t *testing.T) { checkSchema(t, c.schema, c.doc) })
	}
}

// TestSchemaValidatorRejects keeps the validator honest: payloads the
// schemas refuse must fail it (a validator that passes everything would
// make the test above worthless).
func TestSchemaValidatorRejects(t *testing.T) {
	root := loadSchema(t, "mqtt-weights.schema.json")
	for name, doc := range map[string]string{
		"v1":                `{"schema":"mcw.weights.v1","cpe_id":"c","version":1,"issued_at_ms":0,"lease_s":1,"mode":"fixed_split","weights":{"nr":1}}`,
		"dl all zero":       strings.Replace(validWeights, `{"nr":200,"wifi":50,"lifi":0}`, `{"nr":0}`, 1),
		"weight 256":        strings.Replace(validWeights, `"nr":200`, `"nr":256`, 1),
		"ul missing":        validWeights[:strings.Index(validWeights, `,"ul"`)] + "}",
		"bad cpe_id":        strings.Replace(validWeights, `"cpe-0001"`, `"cpe/1"`, 1),
		"extra key":         strings.Replace(validWeights, `"lease_s":30`, `"lease_s":30,"x":1`, 1),
		"lease too big":     strings.Replace(validWeights, `"lease_s":30`, `"lease_s":3601`, 1),
		"caps empty":        strings.Replace(validWeightsCaps, `{"nr":14.7,"wifi":6.3}`, `{}`, 1),
		"cap zero":          strings.Replace(validWeightsCaps, `"nr":14.7`, `"nr":0`, 1),
		"cap too big":       strings.Replace(validWeightsCaps, `"nr":14.7`, `"nr":100001`, 1),
		"cap unknown":       strings.Replace(validWeightsCaps, `"nr":14.7`, `"5g":14.7`, 1),
		"cap denormal":      strings.Replace(validWeightsCaps, `"nr":14.7`, `"nr":1e-320`, 1),
		"key in upper case": strings.Replace(validWeights, `"dl":`, `"DL":`, 1),
		"key capitalised":   strings.Replace(validWeights, `"weights":{"nr":200`, `"Weights":{"nr":200`, 1),
		"WAT in upper case": strings.Replace(validWeights, `"nr":200`, `"NR":200`, 1),
		"null caps":         strings.Replace(validWeightsCaps, `{"nr":14.7,"wifi":6.3}`, `null`, 1),
		"null reason":       strings.Replace(validWeights, `"reason":"dl tick"`, `"reason":null`, 1),
	} {
		var v any
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := validate(root, root, v, "$"); err == nil {
			t.Errorf("%s: the validator accepted %s", name, doc)
		}
		if _, err := ParseWeights([]byte(doc), "cpe-0001"); err == nil {
			t.Errorf("%s: ParseWeights accepted what the schema refuses", name)
		}
	}
}

// TestParseStricterThanDecodedSchema: what a JSON Schema cannot see, because
// it validates the parsed document, ParseWeights still refuses: a duplicate
// key (a parser keeping the last value yields a valid document, one keeping
// the first another) and a cap on a WAT that carries no traffic (the
// schema's description states it). The validator accepts each parsed
// document, so the refusal is ParseWeights' own.
func TestParseStricterThanDecodedSchema(t *testing.T) {
	root := loadSchema(t, "mqtt-weights.schema.json")
	for name, doc := range map[string]string{
		"duplicate cpe_id":   strings.Replace(validWeights, `"cpe_id":"cpe-0001"`, `"cpe_id":"cpe-0002","cpe_id":"cpe-0001"`, 1),
		"duplicate dl":       strings.Replace(validWeights, `"dl":{`, `"dl":{"mode":"fixed_split","weights":{"nr":1}},"dl":{`, 1),
		"duplicate WAT":      strings.Replace(validWeights, `"nr":200`, `"nr":1,"nr":200`, 1),
		"cap at weight 0":    strings.Replace(validWeightsCaps, `"nr":14.7`, `"nr":14.7,"lifi":2`, 1),
		"cap not in the set": strings.Replace(validWeightsCaps, `"nr":14.7`, `"nr":14.7,"lte":2`, 1),
	} {
		var v any
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := validate(root, root, v, "$"); err != nil {
			t.Fatalf("%s: the row no longer tests what the schema cannot see: %v", name, err)
		}
		if _, err := ParseWeights([]byte(doc), "cpe-0001"); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: ParseWeights = %v, want ErrInvalid", name, err)
		}
	}
}

// TestBackendsMatchSchemas: the backend names the agent knows are the
// enum of the schemas the xApp validates states with, in the same order.
func TestBackendsMatchSchemas(t *testing.T) {
	for _, schema := range []string{"mqtt-state.schema.json", "mqtt-proxy-state.schema.json"} {
		prop, _ := loadSchema(t, schema)["properties"].(map[string]any)["backend"].(map[string]any)
		var enum []string
		for _, v := range asSlice(prop["enum"]) {
			s, _ := v.(string)
			enum = append(enum, s)
		}
		if !slices.Equal(enum, Backends()) {
			t.Errorf("%s: backend enum %q, payload.Backends %q", schema, enum, Backends())
		}
	}
}
