package state

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecode checks that Decode never panics, and that what it accepts
// satisfies the record's rules and survives a Save/Load round trip.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"version":9,"weights":{"nr":5,"wifi":0},"mode":"active_standby","lease_until_ms":1763800060000,"saved_at_ms":1763800000000}`))
	f.Add([]byte(`{"version":3,"lease_until_ms":0,"saved_at_ms":1}`))
	f.Add([]byte(`{"version":9007199254740993}`))
	f.Add([]byte(`{"version":-1}`))
	f.Add([]byte(`{"weights":{"nr":0}}`))
	f.Add([]byte(`{} {}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"version":3,"weights":{"nr":1},"lease_until_ms":1,"saved_at_ms":1,"classes":[{"name":"a","match":{"remote_prefixes":["10.0.0.0/8"],"remote_ports":[[1,2]]},"mode":"priority","weights":{"nr":1}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Decode(data)
		if err != nil {
			return
		}
		if r.Version < 0 || r.Version > maxSafeInt || r.LeaseUntilMs < 0 || r.SavedAtMs < 0 || len(data) > MaxFileBytes {
			t.Fatalf("accepted out-of-range record %+v", r)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Decode(b)
		if err != nil {
			t.Fatalf("re-encoded record rejected: %v\n%s", err, b)
		}
		if diff := cmp.Diff(r, again, prefixes); diff != "" {
			t.Fatalf("round trip (-first +again):\n%s", diff)
		}
	})
}
