package payload

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// FuzzParseWeights checks that ParseWeights never panics and that whatever
// it accepts obeys the rules the agent relies on before applying weights.
// The seeds (below and in testdata/fuzz/FuzzParseWeights) run as a normal
// test; `go test -fuzz FuzzParseWeights ./payload` explores further.
func FuzzParseWeights(f *testing.F) {
	f.Add([]byte(validWeights))
	f.Add([]byte(`{"schema":"mcw.weights.v2","cpe_id":"cpe-0001","version":1,"issued_at_ms":0,"lease_s":1,"dl":{"mode":"active_standby","weights":{"nr":0,"wifi":1}},"ul":{"mode":"active_standby","reason":"","weights":{"nr":0,"wifi":1}}}`))
	f.Add([]byte(`{"schema":"mcw.weights.v2","cpe_id":"cpe-0001","version":1,"issued_at_ms":0,"lease_s":0.5,"dl":{"mode":"fixed_split","weights":{"nr":255}},"ul":{"mode":"fixed_split","reason":"","weights":{"nr":255}}}`))
	f.Add([]byte(`{"schema":"mcw.weights.v1","cpe_id":"cpe-0001","version":1,"issued_at_ms":0,"lease_s":1,"mode":"active_standby","reason":"","weights":{"nr":0,"wifi":1}}`))
	f.Add([]byte(validWeightsCaps))
	f.Add([]byte(`{"schema":"mcw.weights.v2","cpe_id":"cpe-0001","version":1,"issued_at_ms":0,"lease_s":1,"dl":{"mode":"fixed_split","weights":{"nr":1},"caps_mbps":{"nr":1e-300}},"ul":{"mode":"fixed_split","weights":{"nr":1},"caps_mbps":{"lte":100000}}}`))
	f.Add([]byte(`{"weights":{"nr":1e2}}`))
	f.Add([]byte(strings.Replace(validWeights, `"dl":`, `"DL":`, 1)))
	f.Add([]byte(strings.Replace(validWeights, `"cpe_id":"cpe-0001"`, `"cpe_id":"x","cpe_id":"cpe-0001"`, 1)))
	f.Add([]byte(strings.Replace(validWeights, `"reason":"tick"`, `"reason":null`, 1)))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(validWeightsClasses))
	f.Add([]byte(strings.Replace(validWeightsClasses, `[5000,5010]`, `[5010,5000]`, 1)))
	f.Add([]byte(strings.Replace(validWeightsClasses, `"10.20.0.0/16"`, `"10.20.0.1/16"`, 1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := ParseWeights(data, "cpe-0001")
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		for _, d := range []DirWeights{u.DL, u.UL} {
			if err := d.Weights.Validate(); err != nil {
				t.Fatalf("accepted weights fail Validate: %v", err)
			}
			if !KnownMode(d.Mode) || len([]rune(d.Reason)) > MaxReasonLen {
				t.Fatalf("accepted out-of-contract direction %+v", d)
			}
			if d.CapsMbps != nil && len(d.CapsMbps) == 0 {
				t.Fatalf("accepted an empty caps_mbps")
			}
			for k, v := range d.CapsMbps {
				if !KnownWAT(k) || !(v >= MinCapMbps) || v > MaxCapMbps || d.Weights[k] == 0 {
					t.Fatalf("accepted cap %s=%v with weight %d", k, v, d.Weights[k])
				}
			}
			if d.Classes != nil && len(d.Classes) == 0 {
				t.Fatalf("accepted an empty class list as classes")
			}
		}
		if err := ValidateClasses(UL, u.UL.Classes); err != nil {
			t.Fatalf("accepted ul classes fail ValidateClasses: %v", err)
		}
		if err := ValidateClasses(DL, u.DL.Classes); err != nil {
			t.Fatalf("accepted dl classes fail ValidateClasses: %v", err)
		}
		if u.Version < 1 || u.LeaseS < MinLeaseSeconds || u.LeaseS > MaxLeaseSeconds || u.CPEID != "cpe-0001" {
			t.Fatalf("accepted out-of-contract payload %+v", u)
		}
		// What was accepted must re-encode into something accepted again.
		dir := func(d DirWeights) map[string]any {
			m := map[string]any{"mode": d.Mode, "reason": d.Reason, "weights": d.Weights}
			if d.CapsMbps != nil {
				m["caps_mbps"] = d.CapsMbps
			}
			if d.Classes != nil {
				m["classes"] = d.Classes
			}
			return m
		}
		again, err := json.Marshal(map[string]any{
			"schema": WeightsSchema, "cpe_id": u.CPEID, "version": u.Version,
			"issued_at_ms": u.IssuedAtMs, "lease_s": u.LeaseS, "dl": dir(u.DL), "ul": dir(u.UL),
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseWeights(again, "cpe-0001"); err != nil {
			t.Fatalf("re-encoded payload rejected: %v\n%s", err, again)
		}
	})
}

// FuzzParseState checks that ParseState never panics, bounds its input and
// that what it accepts re-encodes to itself.
func FuzzParseState(f *testing.F) {
	good, err := State{CPEID: "cpe-0001", Online: true, Role: RoleCPE, Direction: UL, TimeMs: 1763800000000, AppliedVersion: 7,
		AppliedWeights: Weights{"nr": 30, "wifi": 100}, Addresses: map[string]string{"nr": "10.31.1.1", "wifi": "fd00::1"},
		Backend: BackendWRRSysctl, Capabilities: &Capabilities{MaxWeight: 255}, Links: map[string]string{"nr": "up", "wifi": "down"},
		Event: EventApplied}.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(Offline("cpe-0001"))
	f.Add([]byte(`{"schema":"mcw.state.v2","applied_version":1e400}`))
	f.Add([]byte(`{"schema":"mcw.state.v2","cpe_id":"c","online":true,"addresses":{"nr":"10.0.0.1%eth0"}}`))
	f.Add([]byte(`{"schema":"mcw.state.v2","links":{"nr":[[[[[]]]]]}}`))
	f.Add([]byte(`{"schema":"mcw.state.v2","last_error":"\"\\\"{{{{{{"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseState(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if len(data) > MaxPayloadBytes || depth(data) > MaxDepth {
			t.Fatalf("accepted %d bytes nested %d deep", len(data), depth(data))
		}
		if !ValidCPEID(s.CPEID) || len(s.ParsedAddresses()) != len(s.Addresses) {
			t.Fatalf("accepted out-of-contract state %+v", s)
		}
		b, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseState(b); err != nil && len(b) <= MaxPayloadBytes {
			t.Fatalf("re-encoded state rejected: %v\n%s", err, b)
		}
	})
}

func TestBounds(t *testing.T) {
	deep := `{"schema":"mcw.state.v2","links":{"nr":[[[[[[]]]]]]}}`
	tests := []struct {
		name, data, wantErr string
	}{
		{"too deep", deep, "nested 8 levels deep"},
		{"brackets in strings do not count", `{"schema":"mcw.state.v2","cpe_id":"c","online":true,"last_error":"[[[[[[\"{{{{"}`, ""},
		{"too large", `{"schema":"mcw.state.v2","last_error":"` + strings.Repeat("x", MaxPayloadBytes) + `"}`, "at most 16384"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseState([]byte(tt.data))
			if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("ParseState = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// FuzzParseProxyState checks that ParseProxyState never panics, bounds its
// input and that what it accepts re-encodes into something it accepts.
func FuzzParseProxyState(f *testing.F) {
	good, err := ProxyState{ProxyID: "proxy-0001", Online: true, TimeMs: 1, Backend: BackendWRRSysctl,
		Capabilities: Capabilities{MaxWeight: 255}, CPEs: 2, CPEsApplied: 1, Rules: Rules{Used: 4, Limit: 256}}.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(ProxyOffline("proxy-0001"))
	f.Add([]byte(`{"schema":"mcw.proxy-state.v1","proxy_id":"p","online":true,"rules":{"used":-1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProxyState(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if !ValidCPEID(p.ProxyID) || p.CPEs < 0 || p.Rules.Used < 0 {
			t.Fatalf("accepted out-of-contract proxy state %+v", p)
		}
		b, err := p.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseProxyState(b); err != nil && len(b) <= MaxPayloadBytes {
			t.Fatalf("re-encoded proxy state rejected: %v\n%s", err, b)
		}
	})
}
