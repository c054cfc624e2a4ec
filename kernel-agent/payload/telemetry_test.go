package payload

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const validTelemetry = `{"schema":"mcw.telemetry.v1","cpe_id":"cpe-0001","time_ms":1763800000000,"interval_ms":1000,` +
	`"wats":{"nr":{"delivered_mbps":20.5,"rtt_ms":21,"cwnd":10,"bytes_acked":1000,"subflows":1,"up":true,"saturated":0.97,"delivery_rate_mbps":22.1},` +
	`"wifi":{"delivered_mbps":0,"rtt_ms":0,"cwnd":0,"bytes_acked":0,"subflows":0,"up":false}}}`

func TestParseTelemetry(t *testing.T) {
	got, err := ParseTelemetry([]byte(validTelemetry))
	if err != nil {
		t.Fatal(err)
	}
	sat, rate := 0.97, 22.1
	want := Telemetry{
		Schema: TelemetrySchema, CPEID: "cpe-0001", TimeMs: 1763800000000, IntervalMs: 1000,
		WATs: map[string]WATTelemetry{
			"nr":   {DeliveredMbps: 20.5, RTTMs: 21, Cwnd: 10, BytesAcked: 1000, Subflows: 1, Up: true, Saturated: &sat, DeliveryRateMbps: &rate},
			"wifi": {},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("ParseTelemetry (-want +got):\n%s", diff)
	}
	// Round trip: unknown fields stay absent, known ones survive.
	b, err := got.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(b), "saturated") != 1 || strings.Count(string(b), "delivery_rate_mbps") != 1 {
		t.Fatalf("absent fields must stay absent: %s", b)
	}
	again, err := ParseTelemetry(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, again); diff != "" {
		t.Fatalf("round trip (-first +again):\n%s", diff)
	}
}

func TestParseTelemetryRejects(t *testing.T) {
	nr := func(fields string) string {
		return `{"schema":"mcw.telemetry.v1","cpe_id":"c","time_ms":1,"wats":{"nr":{` + fields + `}}}`
	}
	for name, doc := range map[string]string{
		"saturated above 1":      nr(`"saturated":1.01`),
		"saturated negative":     nr(`"saturated":-0.1`),
		"saturated a string":     nr(`"saturated":"1"`),
		"delivery rate negative": nr(`"delivery_rate_mbps":-1`),
		"delivered negative":     nr(`"delivered_mbps":-1`),
		"rtt negative":           nr(`"rtt_ms":-1`),
		"cwnd negative":          nr(`"cwnd":-1`),
		"unknown per-WAT field":  nr(`"cwnd_limited":1`),
		"unknown WAT":            `{"schema":"mcw.telemetry.v1","cpe_id":"c","time_ms":1,"wats":{"5g":{}}}`,
		"wrong schema":           `{"schema":"mcw.weights.v1","cpe_id":"c","time_ms":1,"wats":{}}`,
		"missing cpe_id":         `{"schema":"mcw.telemetry.v1","time_ms":1,"wats":{}}`,
		"missing wats":           `{"schema":"mcw.telemetry.v1","cpe_id":"c","time_ms":1}`,
		"negative time":          `{"schema":"mcw.telemetry.v1","cpe_id":"c","time_ms":-1,"wats":{}}`,
		"trailing data":          validTelemetry + `{}`,
		"saturated overflows":    nr(`"saturated":1e999`),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseTelemetry([]byte(doc)); !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseTelemetry(%s) = %v, want ErrInvalid", doc, err)
			}
		})
	}
	for _, sat := range []string{"0", "1", "0.5"} {
		if _, err := ParseTelemetry([]byte(nr(`"saturated":` + sat))); err != nil {
			t.Errorf("saturated %s rejected: %v", sat, err)
		}
	}
}

// FuzzParseTelemetry checks that ParseTelemetry never panics and that what
// it accepts satisfies the per-WAT ranges and re-encodes to itself.
func FuzzParseTelemetry(f *testing.F) {
	f.Add([]byte(validTelemetry))
	f.Add([]byte(`{"schema":"mcw.telemetry.v1","cpe_id":"c","time_ms":1,"wats":{"nr":{"saturated":1}}}`))
	f.Add([]byte(`{"wats":{"nr":{"saturated":-0}}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tm, err := ParseTelemetry(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		for k, w := range tm.WATs {
			if !KnownWAT(k) || w.Validate() != nil {
				t.Fatalf("accepted out-of-contract WAT %q: %+v", k, w)
			}
		}
		b, err := tm.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseTelemetry(b)
		if err != nil {
			t.Fatalf("re-encoded telemetry rejected: %v\n%s", err, b)
		}
		if diff := cmp.Diff(tm, again); diff != "" {
			t.Fatalf("round trip (-first +again):\n%s", diff)
		}
	})
}
