package payload

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// validWeightsClasses carries two ul classes (one of every key, and a
// cgroup) and one dl class.
const validWeightsClasses = `{"schema":"mcw.weights.v2","cpe_id":"cpe-0001","version":44,` +
	`"issued_at_ms":1763800000123,"lease_s":30,` +
	`"dl":{"mode":"load_balancing","weights":{"nr":1,"wifi":1},"classes":[` +
	`{"name":"video","match":{"remote_prefixes":["2001:db8::/32"]},"mode":"fixed_split","weights":{"nr":1,"wifi":0}}]},` +
	`"ul":{"mode":"load_balancing","weights":{"nr":2,"wifi":1},"caps_mbps":{"nr":20,"wifi":10},"classes":[` +
	`{"name":"control","match":{"dscp":[46,34],"protocols":[6,17],"remote_ports":[[5000,5010],[443,443]],` +
	`"remote_prefixes":["10.20.0.0/16","fd00::/8"]},"mode":"priority","reason":"robot loop",` +
	`"weights":{"nr":1,"wifi":0},"caps_mbps":{"nr":2.5},"urgent":true},` +
	`{"name":"logs-2","match":{"cgroup":"/system.slice/logs.service"},"mode":"smallest_delay","weights":{"wifi":1}}]}}`

func TestParseWeightsClasses(t *testing.T) {
	got, err := ParseWeights([]byte(validWeightsClasses), "cpe-0001")
	if err != nil {
		t.Fatalf("ParseWeights: %v", err)
	}
	want := WeightsUpdate{
		CPEID: "cpe-0001", Version: 44, IssuedAtMs: 1763800000123, LeaseS: 30,
		DL: DirWeights{Mode: "load_balancing", Weights: Weights{NR: 1, WiFi: 1}, Classes: []Class{
			{Name: "video", Match: Match{RemotePrefixes: []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}},
				Mode: "fixed_split", Weights: Weights{NR: 1, WiFi: 0}}}},
		UL: DirWeights{Mode: "load_balancing", Weights: Weights{NR: 2, WiFi: 1}, CapsMbps: map[WAT]float64{NR: 20, WiFi: 10}, Classes: []Class{
			{Name: "control", Match: Match{DSCP: []int{46, 34}, Protocols: []int{6, 17},
				RemotePorts:    []PortRange{{5000, 5010}, {443, 443}},
				RemotePrefixes: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("fd00::/8")}},
				Mode: "priority", Reason: "robot loop", Weights: Weights{NR: 1, WiFi: 0}, CapsMbps: map[WAT]float64{NR: 2.5}, Urgent: true},
			{Name: "logs-2", Match: Match{Cgroup: "/system.slice/logs.service"}, Mode: "smallest_delay", Weights: Weights{WiFi: 1}},
		}},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Fatalf("ParseWeights (-want +got):\n%s", diff)
	}
	// Absent and empty mean the same: no classes.
	for _, doc := range []string{validWeights, strings.Replace(validWeights, `"weights":{"nr":30`, `"classes":[],"weights":{"nr":30`, 1)} {
		u, err := ParseWeights([]byte(doc), "cpe-0001")
		if err != nil || u.UL.Classes != nil || u.DL.Classes != nil {
			t.Fatalf("without classes: %+v, %v", u, err)
		}
	}
}

// classesMutate replaces old with new in validWeightsClasses, failing
// when old is absent (a stale row would test the valid payload).
func classesMutate(t *testing.T, old, new string) string {
	t.Helper()
	if !strings.Contains(validWeightsClasses, old) {
		t.Fatalf("%q not in the valid payload", old)
	}
	return strings.Replace(validWeightsClasses, old, new, 1)
}

// TestParseWeightsClassesRejects: every refusal names where and why, so
// the operator reads it in the agent's last_error.
func TestParseWeightsClassesRejects(t *testing.T) {
	nine := make([]string, 9)
	for i := range nine {
		nine[i] = fmt.Sprintf(`{"name":"c%d","match":{"dscp":[%d]},"mode":"fixed_split","weights":{"nr":1}}`, i, i)
	}
	for _, tt := range []struct{ name, old, new, reason string }{
		{"unknown mode", `"mode":"priority"`, `"mode":"redundant"`, `ul.classes[control].mode "redundant": missing or unknown`},
		{"mode missing", `"mode":"priority",`, ``, `ul.classes[0].mode: missing`},
		{"name missing", `{"name":"control",`, `{`, `ul.classes[0].name: missing`},
		{"match missing", `"match":{"cgroup":"/system.slice/logs.service"},`, ``, `ul.classes[1].match: missing`},
		{"weights missing", `,"weights":{"wifi":1}`, ``, `ul.classes[1].weights: missing`},
		{"bad name", `"name":"control"`, `"name":"Control"`, `ul.classes[0].name "Control"`},
		{"duplicate names", `"name":"logs-2"`, `"name":"control"`, `ul.classes[1]: name "control" twice`},
		{"port range reversed", `[5000,5010]`, `[5010,5000]`, `[5010, 5000] is not a range`},
		{"port zero", `[443,443]`, `[0,443]`, `0 is not a port`},
		{"port too big", `[443,443]`, `[443,65536]`, `65536 is not a port`},
		{"port range of three", `[443,443]`, `[443,444,445]`, `not 3 numbers`},
		{"port range of one", `[443,443]`, `[443]`, `not 1 numbers`},
		{"port as string", `[443,443]`, `["443",443]`, `invalid payload`},
		{"prefix garbage", `"10.20.0.0/16"`, `"10.20.0.0/33"`, `"10.20.0.0/33" is not a prefix`},
		{"prefix without length", `"10.20.0.0/16"`, `"10.20.0.0"`, `is not a prefix`},
		{"prefix with host bits", `"10.20.0.0/16"`, `"10.20.0.1/16"`, `10.20.0.1/16 has host bits set (the network is 10.20.0.0/16)`},
		{"prefix mapped", `"10.20.0.0/16"`, `"::ffff:10.20.0.0/112"`, `IPv4 form`},
		{"prefix twice", `"fd00::/8"`, `"10.20.0.0/16"`, `10.20.0.0/16 twice`},
		{"cgroup in dl", `"match":{"remote_prefixes":["2001:db8::/32"]}`, `"match":{"cgroup":"/a"}`, `dl.classes[video].match.cgroup: only the uplink`},
		{"cgroup relative", `"/system.slice/logs.service"`, `"system.slice"`, `want a clean absolute cgroup v2 path`},
		{"cgroup dot-dot", `"/system.slice/logs.service"`, `"/system.slice/../etc"`, `want a clean absolute cgroup v2 path`},
		{"cgroup empty segment", `"/system.slice/logs.service"`, `"/system.slice//x"`, `want a clean absolute cgroup v2 path`},
		{"cgroup empty", `"/system.slice/logs.service"`, `""`, `cgroup: empty`},
		{"all-zero class weights", `"weights":{"wifi":1}`, `"weights":{"wifi":0,"nr":0}`, `ul.classes[logs-2]: invalid payload: weights: all zero`},
		{"cap at weight 0", `"caps_mbps":{"nr":2.5}`, `"caps_mbps":{"nr":2.5,"wifi":1}`, `wifi has weight 0`},
		{"cap below the floor", `"caps_mbps":{"nr":2.5}`, `"caps_mbps":{"nr":0.01}`, `below 0.064`},
		{"caps empty", `"caps_mbps":{"nr":2.5}`, `"caps_mbps":{}`, `caps_mbps: empty`},
		{"empty match", `"match":{"cgroup":"/system.slice/logs.service"}`, `"match":{}`, `match: no key`},
		{"empty dscp", `"dscp":[46,34]`, `"dscp":[]`, `dscp: 0 items`},
		{"dscp 64", `"dscp":[46,34]`, `"dscp":[64]`, `64 outside [0, 63]`},
		{"dscp twice", `"dscp":[46,34]`, `"dscp":[46,46]`, `46 twice`},
		{"protocol 256", `"protocols":[6,17]`, `"protocols":[256]`, `256 outside [0, 255]`},
		{"protocol float", `"protocols":[6,17]`, `"protocols":[6.5]`, `is not a small non-negative integer`},
		{"unknown key in match", `"dscp":[46,34]`, `"dscp":[46,34],"tos":1`, `invalid payload`},
		{"urgent as string", `"urgent":true`, `"urgent":"yes"`, `invalid payload`},
		{"classes null", `"classes":[{"name":"video"`, `"classes":null,"x":[{"name":"video"`, `null is not a value`},
		{"nine classes", `"classes":[{"name":"video","match":{"remote_prefixes":["2001:db8::/32"]},"mode":"fixed_split","weights":{"nr":1,"wifi":0}}]`,
			`"classes":[` + strings.Join(nine, ",") + `]`, `dl.classes: 9 classes, at most 8`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			data := classesMutate(t, tt.old, tt.new)
			_, err := ParseWeights([]byte(data), "cpe-0001")
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("ParseWeights = %v, want ErrInvalid saying %q", err, tt.reason)
			}
		})
	}
}

// TestClassesMatchSchema: what the agent accepts the schema accepts, and
// the schema refuses rows the agent refuses (a validator that passed
// everything would make the check worthless).
func TestClassesMatchSchema(t *testing.T) {
	checkSchema(t, "mqtt-weights.schema.json", []byte(validWeightsClasses))
	root := loadSchema(t, "mqtt-weights.schema.json")
	for name, doc := range map[string]string{
		"unknown mode":   strings.Replace(validWeightsClasses, `"mode":"priority"`, `"mode":"redundant"`, 1),
		"dscp 64":        strings.Replace(validWeightsClasses, `"dscp":[46,34]`, `"dscp":[64]`, 1),
		"dscp twice":     strings.Replace(validWeightsClasses, `"dscp":[46,34]`, `"dscp":[46,46]`, 1),
		"port of three":  strings.Replace(validWeightsClasses, `[443,443]`, `[443,444,445]`, 1),
		"empty match":    strings.Replace(validWeightsClasses, `"match":{"cgroup":"/system.slice/logs.service"}`, `"match":{}`, 1),
		"bad name":       strings.Replace(validWeightsClasses, `"name":"control"`, `"name":"Control"`, 1),
		"class all zero": strings.Replace(validWeightsClasses, `"weights":{"wifi":1}`, `"weights":{"wifi":0}`, 1),
	} {
		var v any
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := validate(root, root, v, "$"); err == nil {
			t.Errorf("%s: the validator accepted it", name)
		}
		if _, err := ParseWeights([]byte(doc), "cpe-0001"); err == nil {
			t.Errorf("%s: ParseWeights accepted what the schema refuses", name)
		}
	}
}

func TestStateAppliedClasses(t *testing.T) {
	s := State{CPEID: "cpe-0001", Online: true, Role: RoleCPE, Direction: UL, TimeMs: 5, AppliedVersion: 3,
		AppliedWeights: Weights{NR: 2, WiFi: 1}, Backend: BackendMPTCPShares,
		Capabilities: &Capabilities{MaxWeight: 255, DirectionsCoupled: true, Semantics: SemanticsRateCaps, MaxClasses: 8},
		AppliedClasses: map[string]AppliedClass{
			"control": {CapsMbps: map[string]float64{NR: 2.5, WiFi: 0.064}, Urgent: true},
			"logs-2":  {CapsMbps: map[string]float64{NR: 0.064}},
		}, Links: map[string]string{NR: "up", WiFi: "up"}, Event: EventApplied}
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	checkSchema(t, "mqtt-state.schema.json", b)
	got, err := ParseState(b)
	if err != nil {
		t.Fatal(err)
	}
	s.Schema = StateSchema
	if diff := cmp.Diff(s, got); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
	root := loadSchema(t, "mqtt-state.schema.json")
	const head = `{"schema":"mcw.state.v2","cpe_id":"c","online":true,`
	for name, doc := range map[string]string{
		"bad class name":   head + `"applied_classes":{"Video":{}}}`,
		"cap zero":         head + `"applied_classes":{"video":{"caps_mbps":{"nr":0}}}}`,
		"cap unknown WAT":  head + `"applied_classes":{"video":{"caps_mbps":{"5g":1}}}}`,
		"unknown key":      head + `"applied_classes":{"video":{"ceil":1}}}`,
		"max_classes nine": head + `"capabilities":{"max_weight":1,"max_classes":9}}`,
	} {
		var v any
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := validate(root, root, v, "$"); err == nil {
			t.Errorf("%s: the validator accepted it", name)
		}
		if _, err := ParseState([]byte(doc)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: ParseState = %v, want ErrInvalid", name, err)
		}
	}
}

// TestClassBoundsMatchSchemas: the bounds payload declares are the
// schemas' (weights' classes and match, the states' max_classes and
// applied_classes).
func TestClassBoundsMatchSchemas(t *testing.T) {
	w := loadSchema(t, "mqtt-weights.schema.json")
	defs := w["$defs"].(map[string]any)
	dir := defs["direction"].(map[string]any)["properties"].(map[string]any)
	class := defs["class"].(map[string]any)["properties"].(map[string]any)
	match := defs["match"].(map[string]any)["properties"].(map[string]any)
	for name, tc := range map[string]struct {
		got  any
		want float64
	}{
		"classes maxItems":         {dir["classes"].(map[string]any)["maxItems"], MaxClasses},
		"dscp maxItems":            {match["dscp"].(map[string]any)["maxItems"], maxDSCPs},
		"dscp maximum":             {match["dscp"].(map[string]any)["items"].(map[string]any)["maximum"], maxDSCP},
		"protocols maxItems":       {match["protocols"].(map[string]any)["maxItems"], maxProtocols},
		"protocols maximum":        {match["protocols"].(map[string]any)["items"].(map[string]any)["maximum"], maxProtocol},
		"remote_ports maxItems":    {match["remote_ports"].(map[string]any)["maxItems"], maxPortRanges},
		"remote_prefixes maxItems": {match["remote_prefixes"].(map[string]any)["maxItems"], maxPrefixes},
		"prefix maxLength":         {match["remote_prefixes"].(map[string]any)["items"].(map[string]any)["maxLength"], maxPrefixLen},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: schema %v, payload %v", name, tc.got, tc.want)
		}
	}
	if p := class["name"].(map[string]any)["pattern"]; p != classNameRE.String() {
		t.Errorf("class name pattern: schema %v, payload %s", p, classNameRE)
	}
	if p := match["cgroup"].(map[string]any)["pattern"]; p != cgroupRE.String() {
		t.Errorf("cgroup pattern: schema %v, payload %s", p, cgroupRE)
	}
	for _, schema := range []string{"mqtt-state.schema.json", "mqtt-proxy-state.schema.json"} {
		caps := loadSchema(t, schema)["properties"].(map[string]any)["capabilities"].(map[string]any)["properties"].(map[string]any)
		if got := caps["max_classes"].(map[string]any)["maximum"]; got != float64(MaxClasses) {
			t.Errorf("%s: max_classes maximum %v, want %d", schema, got, MaxClasses)
		}
	}
	ac := loadSchema(t, "mqtt-state.schema.json")["properties"].(map[string]any)["applied_classes"].(map[string]any)
	if ac["maxProperties"] != float64(MaxClasses) || ac["propertyNames"].(map[string]any)["pattern"] != classNameRE.String() {
		t.Errorf("applied_classes: %v", ac)
	}
}
