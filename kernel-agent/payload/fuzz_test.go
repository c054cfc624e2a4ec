package payload

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzParseWeights checks that ParseWeights never panics and that whatever
// it accepts obeys the rules the agent relies on before applying weights.
// The seeds (below and in testdata/fuzz/FuzzParseWeights) run as a normal
// test; `go test -fuzz FuzzParseWeights ./payload` explores further.
func FuzzParseWeights(f *testing.F) {
	f.Add([]byte(validWeights))
	f.Add([]byte(`{"schema":"mcw.weights.v1","cpe_id":"cpe-0001","version":1,"issued_at_ms":0,"lease_s":1,"mode":"active_standby","reason":"","weights":{"nr":0,"wifi":1}}`))
	f.Add([]byte(`{"schema":"mcw.weights.v1","cpe_id":"cpe-0001","version":1,"issued_at_ms":0,"lease_s":0.5,"mode":"fixed_split","reason":"","weights":{"nr":255}}`))
	f.Add([]byte(`{"weights":{"nr":1e2}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := ParseWeights(data, "cpe-0001")
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if err := u.Weights.Validate(); err != nil {
			t.Fatalf("accepted weights fail Validate: %v", err)
		}
		if u.Version < 1 || u.LeaseS < MinLeaseSeconds || u.LeaseS > MaxLeaseSeconds || u.CPEID != "cpe-0001" || !KnownMode(u.Mode) {
			t.Fatalf("accepted out-of-contract payload %+v", u)
		}
		// What was accepted must re-encode into something accepted again.
		again, err := json.Marshal(map[string]any{
			"schema": WeightsSchema, "cpe_id": u.CPEID, "version": u.Version,
			"issued_at_ms": u.IssuedAtMs, "lease_s": u.LeaseS, "mode": u.Mode,
			"reason": u.Reason, "weights": u.Weights,
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseWeights(again, "cpe-0001"); err != nil {
			t.Fatalf("re-encoded payload rejected: %v\n%s", err, again)
		}
	})
}
