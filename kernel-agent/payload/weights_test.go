package payload

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const validWeights = `{"schema":"mcw.weights.v2","cpe_id":"cpe-0001","version":42,` +
	`"issued_at_ms":1763800000123,"lease_s":30,` +
	`"dl":{"mode":"fixed_split","reason":"dl tick","weights":{"nr":200,"wifi":50,"lifi":0}},` +
	`"ul":{"mode":"load_balancing","reason":"tick","weights":{"nr":30,"wifi":100,"lifi":1}}}`

func TestParseWeightsValid(t *testing.T) {
	got, err := ParseWeights([]byte(validWeights), "cpe-0001")
	if err != nil {
		t.Fatalf("ParseWeights: %v", err)
	}
	want := WeightsUpdate{
		CPEID: "cpe-0001", Version: 42, IssuedAtMs: 1763800000123, LeaseS: 30,
		DL: DirWeights{Mode: "fixed_split", Reason: "dl tick", Weights: Weights{NR: 200, WiFi: 50, LiFi: 0}},
		UL: DirWeights{Mode: "load_balancing", Reason: "tick", Weights: Weights{NR: 30, WiFi: 100, LiFi: 1}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("ParseWeights (-want +got):\n%s", diff)
	}
}

// validWeightsCaps carries ul caps for a rate-caps agent, one of them for a
// WAT at weight 0 (accepted: the backend ignores it).
const validWeightsCaps = `{"schema":"mcw.weights.v2","cpe_id":"cpe-0001","version":43,` +
	`"issued_at_ms":1763800000123,"lease_s":30,` +
	`"dl":{"mode":"fixed_split","weights":{"nr":7,"wifi":3}},` +
	`"ul":{"mode":"fixed_split","weights":{"nr":7,"wifi":3,"lifi":0},"caps_mbps":{"nr":14.7,"wifi":6.3}}}`

func TestParseWeightsCaps(t *testing.T) {
	got, err := ParseWeights([]byte(validWeightsCaps), "cpe-0001")
	if err != nil {
		t.Fatalf("ParseWeights: %v", err)
	}
	want := WeightsUpdate{
		CPEID: "cpe-0001", Version: 43, IssuedAtMs: 1763800000123, LeaseS: 30,
		DL: DirWeights{Mode: "fixed_split", Weights: Weights{NR: 7, WiFi: 3}},
		UL: DirWeights{Mode: "fixed_split", Weights: Weights{NR: 7, WiFi: 3, LiFi: 0},
			CapsMbps: map[WAT]float64{NR: 14.7, WiFi: 6.3}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("ParseWeights (-want +got):\n%s", diff)
	}
	caps := `"caps_mbps":{"nr":14.7,"wifi":6.3}`
	for _, tt := range []struct{ name, caps string }{
		{"empty", `"caps_mbps":{}`},
		{"null", `"caps_mbps":null`},
		{"zero", `"caps_mbps":{"nr":0}`},
		{"negative", `"caps_mbps":{"nr":-1}`},
		{"above the bound", `"caps_mbps":{"nr":100000.5}`},
		{"huge exponent", `"caps_mbps":{"nr":1e400}`},
		{"string", `"caps_mbps":{"nr":"10"}`},
		{"unknown WAT", `"caps_mbps":{"5g":10}`},
		{"nested", `"caps_mbps":{"nr":{"x":1}}`},
		{"array", `"caps_mbps":[10]`},
		{"on a WAT at weight 0", `"caps_mbps":{"nr":14.7,"lifi":2}`},
		{"on a WAT not in the set", `"caps_mbps":{"nr":14.7,"lte":2}`},
		{"denormal", `"caps_mbps":{"nr":1e-320}`},
		{"below the floor", `"caps_mbps":{"nr":0.0639}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(validWeightsCaps, caps) {
				t.Fatal("stale row: the valid payload changed")
			}
			data := strings.Replace(validWeightsCaps, caps, tt.caps, 1)
			_, err := ParseWeights([]byte(data), "cpe-0001")
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseWeights(%s) = %v, want an error wrapping ErrInvalid", data, err)
			}
		})
	}
	// The bounds themselves are caps.
	for _, c := range []string{`"caps_mbps":{"nr":100000}`, `"caps_mbps":{"nr":0.064}`} {
		if _, err := ParseWeights([]byte(strings.Replace(validWeightsCaps, caps, c, 1)), "cpe-0001"); err != nil {
			t.Fatalf("cap at the bound %s: %v", c, err)
		}
	}
}

// mutate replaces old with new in the valid payload, failing if old is absent
// so that a stale table row cannot silently test the valid payload.
func mutate(t *testing.T, old, new string) string {
	t.Helper()
	if !strings.Contains(validWeights, old) {
		t.Fatalf("%q not in the valid payload", old)
	}
	return strings.Replace(validWeights, old, new, 1)
}

func TestParseWeightsRejects(t *testing.T) {
	tests := []struct {
		name, old, new string
	}{
		{"wrong schema", `"mcw.weights.v2"`, `"mcw.weights.v3"`},
		{"schema v1", `"mcw.weights.v2"`, `"mcw.weights.v1"`},
		{"dl missing", `"dl":{"mode":"fixed_split","reason":"dl tick","weights":{"nr":200,"wifi":50,"lifi":0}},`, ``},
		{"dl null", `{"mode":"fixed_split","reason":"dl tick","weights":{"nr":200,"wifi":50,"lifi":0}}`, `null`},
		{"dl all zero", `{"nr":200,"wifi":50,"lifi":0}`, `{"nr":0,"wifi":0}`},
		{"dl unknown mode", `"fixed_split"`, `"greedy"`},
		{"dl mode missing", `"mode":"fixed_split",`, ``},
		{"dl weight too big", `"nr":200,`, `"nr":256,`},
		{"dl unknown key", `"reason":"dl tick",`, `"reason":"dl tick","extra":1,`},
		{"top-level mode (v1 shape)", `"lease_s":30,`, `"lease_s":30,"mode":"fixed_split",`},
		{"other cpe", `"cpe-0001"`, `"cpe-0002"`},
		{"version zero", `"version":42`, `"version":0`},
		{"version negative", `"version":42`, `"version":-1`},
		{"version float", `"version":42`, `"version":42.5`},
		{"version exponent", `"version":42`, `"version":4e1`},
		{"version string", `"version":42`, `"version":"42"`},
		{"version huge", `"version":42`, `"version":9007199254740993`},
		{"lease zero", `"lease_s":30`, `"lease_s":0`},
		{"lease too long", `"lease_s":30`, `"lease_s":3600.5`},
		{"lease string", `"lease_s":30`, `"lease_s":"30"`},
		{"issued negative", `"issued_at_ms":1763800000123`, `"issued_at_ms":-5`},
		{"unknown mode", `"load_balancing"`, `"greedy"`},
		{"unknown top-level key", `"lease_s":30,`, `"lease_s":30,"extra":1,`},
		{"reason too long", `"reason":"tick"`, `"reason":"` + strings.Repeat("x", MaxReasonLen+1) + `"`},
		{"unknown WAT", `"lifi":1`, `"lifi":1,"5g":3`},
		{"weight too big", `"wifi":100`, `"wifi":256`},
		{"weight negative", `"wifi":100`, `"wifi":-1`},
		{"weight float", `"wifi":100`, `"wifi":1.5`},
		{"all zero", `{"nr":30,"wifi":100,"lifi":1}`, `{"nr":0,"wifi":0}`},
		{"empty weights", `{"nr":30,"wifi":100,"lifi":1}`, `{}`},
		{"weights null", `{"nr":30,"wifi":100,"lifi":1}`, `null`},
		{"trailing data", `1}}`, `1}} {}`},
		{"not an object", validWeights, `[1,2]`},
		{"too deep", `"lifi":1}`, `"lifi":1,"x":{"y":[]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := mutate(t, tt.old, tt.new)
			_, err := ParseWeights([]byte(data), "cpe-0001")
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseWeights(%s) = %v, want an error wrapping ErrInvalid", data, err)
			}
		})
	}
}

func TestParseWeightsMissingKeys(t *testing.T) {
	// reason is optional, every other key is required.
	for _, key := range []string{"schema", "cpe_id", "version", "issued_at_ms", "lease_s", "dl", "ul", "ul.mode", "ul.weights", "dl.mode", "dl.weights"} {
		t.Run(key, func(t *testing.T) {
			var m map[string]any
			if err := jsonUnmarshal([]byte(validWeights), &m); err != nil {
				t.Fatal(err)
			}
			if dir, sub, ok := strings.Cut(key, "."); ok {
				delete(m[dir].(map[string]any), sub)
			} else {
				delete(m, key)
			}
			data := jsonMarshal(t, m)
			if _, err := ParseWeights(data, "cpe-0001"); !errors.Is(err, ErrInvalid) {
				t.Fatalf("without %q: err = %v, want ErrInvalid", key, err)
			}
		})
	}
}

func TestParseWeightsOversized(t *testing.T) {
	data := mutate(t, `"reason":"tick"`, `"reason":"tick"`+strings.Repeat(" ", MaxPayloadBytes))
	if _, err := ParseWeights([]byte(data), "cpe-0001"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
}

func TestWeightsString(t *testing.T) {
	got := Weights{LiFi: 1, WiFi: 100, NR: 30, LTE: 0}.String()
	if want := "nr=30 lte=0 wifi=100 lifi=1"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}

// TestParseWeightsV1 pins the refusal an operator sees while the xApp
// still speaks v1: it names the schema and what to do.
func TestParseWeightsV1(t *testing.T) {
	v1 := `{"schema":"mcw.weights.v1","cpe_id":"cpe-0001","version":42,"issued_at_ms":1763800000123,` +
		`"lease_s":30,"mode":"load_balancing","reason":"tick","weights":{"nr":30,"wifi":100}}`
	_, err := ParseWeights([]byte(v1), "cpe-0001")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "mcw.weights.v1 is not accepted by this agent: upgrade the xApp") {
		t.Fatalf("ParseWeights(v1) = %v", err)
	}
}

func TestStateRoundTrip(t *testing.T) {
	s := State{CPEID: "cpe-0001", Online: true, Role: RoleCPE, Direction: UL, TimeMs: 5, AppliedVersion: 3,
		AppliedWeights: Weights{NR: 1, WiFi: 2}, AppliedCapsMbps: map[string]float64{WiFi: 12.5},
		Addresses: map[string]string{NR: "10.0.0.2", WiFi: "fd00::2"}, Backend: BackendMPTCPShares,
		Capabilities: &Capabilities{MaxWeight: 255, DirectionsCoupled: true, Semantics: SemanticsRateCaps},
		Links:        map[string]string{NR: "up"}, Event: EventApplied}
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseState(b)
	if err != nil {
		t.Fatal(err)
	}
	s.Schema = StateSchema
	if diff := cmp.Diff(s, got); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
	if string(Offline("cpe-0001")) != `{"schema":"mcw.state.v2","cpe_id":"cpe-0001","online":false}` {
		t.Fatalf("Offline = %s", Offline("cpe-0001"))
	}
}

func TestParseWeightsReasonOptional(t *testing.T) {
	u, err := ParseWeights([]byte(mutate(t, `"reason":"tick",`, ``)), "cpe-0001")
	if err != nil || u.UL.Reason != "" || u.DL.Reason != "dl tick" {
		t.Fatalf("without reason: %+v, %v", u, err)
	}
}

func TestValidCPEID(t *testing.T) {
	for id, want := range map[string]bool{
		"cpe-0001": true, "A.b_c-9": true, "": false, "-cpe": false, "cpe/1": false,
		"cpe+": false, "cpe#": false, strings.Repeat("a", 64): true, strings.Repeat("a", 65): false,
	} {
		if got := ValidCPEID(id); got != want {
			t.Errorf("ValidCPEID(%q) = %v, want %v", id, got, want)
		}
	}
}

func BenchmarkParseWeights(b *testing.B) {
	data := []byte(validWeights)
	for i := 0; i < b.N; i++ {
		if _, err := ParseWeights(data, "cpe-0001"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseStateKeys: the keys the schema requires (online false is a
// report, online missing is not) and the backend vocabulary.
func TestParseStateKeys(t *testing.T) {
	const head = `{"schema":"mcw.state.v2","cpe_id":"c",`
	type row struct {
		name, doc, wantErr string
		online             bool
	}
	tests := []row{
		{"online", head + `"online":true}`, "", true},
		{"offline", head + `"online":false}`, "", false},
		{"schema missing", `{"cpe_id":"c","online":true}`, "schema: want", false},
		{"cpe_id missing", `{"schema":"mcw.state.v2","online":true}`, "cpe_id: missing", false},
		{"online missing", `{"schema":"mcw.state.v2","cpe_id":"c"}`, "online: missing", false},
		{"online in another case", head + `"Online":true}`, "case-sensitive", false},
		{"online twice", head + `"online":false,"online":true}`, "twice", false},
		{"unknown backend", head + `"online":true,"backend":"bpf"}`, `backend "bpf": unknown`, false},
	}
	for _, b := range Backends() {
		tests = append(tests, row{"backend " + b, head + `"online":true,"backend":"` + b + `"}`, "", true})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseState([]byte(tt.doc))
			if tt.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseState = %v, want ErrInvalid with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || s.Online != tt.online {
				t.Fatalf("ParseState = %+v, %v; want online %t", s, err, tt.online)
			}
		})
	}
}

func TestParseStateRejectsCapsAndSemantics(t *testing.T) {
	for name, doc := range map[string]string{
		"semantics unknown":   `{"schema":"mcw.state.v2","cpe_id":"c","online":true,"capabilities":{"max_weight":1,"on_off_only":true,"directions_coupled":true,"semantics":"magic"}}`,
		"applied cap zero":    `{"schema":"mcw.state.v2","cpe_id":"c","online":true,"applied_caps_mbps":{"nr":0}}`,
		"applied cap huge":    `{"schema":"mcw.state.v2","cpe_id":"c","online":true,"applied_caps_mbps":{"nr":100001}}`,
		"applied cap unknown": `{"schema":"mcw.state.v2","cpe_id":"c","online":true,"applied_caps_mbps":{"5g":1}}`,
	} {
		if _, err := ParseState([]byte(doc)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: ParseState = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := ParseProxyState([]byte(`{"schema":"mcw.proxy-state.v1","proxy_id":"p","online":true,"capabilities":{"max_weight":1,"on_off_only":false,"directions_coupled":false,"semantics":"x"}}`)); !errors.Is(err, ErrInvalid) {
		t.Errorf("proxy state with unknown semantics: %v", err)
	}
}

func TestCapabilitiesOfSemantics(t *testing.T) {
	for _, tt := range []struct{ backend, want string }{
		{BackendWRRSysctl, SemanticsWRR},
		{BackendMPTCPShares, SemanticsRateCaps},
		{BackendMPTCPUpstream, SemanticsOnOff},
		{BackendDryRun, SemanticsWRR},
	} {
		if got := CapabilitiesOf(tt.backend, Capabilities{MaxWeight: 1}).Semantics; got != tt.want {
			t.Errorf("CapabilitiesOf(%s).Semantics = %q, want %q", tt.backend, got, tt.want)
		}
	}
	if got := CapabilitiesOf(BackendDryRun, Capabilities{MaxWeight: 1, Semantics: SemanticsRateCaps}).Semantics; got != SemanticsRateCaps {
		t.Errorf("a backend's own semantics must win: got %q", got)
	}
}
