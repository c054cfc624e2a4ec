package payload

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const validTelemetry = `{"schema":"mcw.telemetry.v2","cpe_id":"cpe-0001","time_ms":1763800000000,"interval_ms":1000,` +
	`"wats":{"nr":{"up":true,"subflows":1,"rtt_ms":21,` +
	`"ul":{"delivered_mbps":20.5,"bytes_acked":1000,"cwnd":10,"saturated":0.97,"delivery_rate_mbps":22.1,"retrans_pct":0.25},` +
	`"dl":{"delivered_mbps":80.25,"bytes_received":4000}},` +
	`"wifi":{"up":false,"subflows":0,"rtt_ms":0}}}`

func TestParseTelemetry(t *testing.T) {
	got, err := ParseTelemetry([]byte(validTelemetry))
	if err != nil {
		t.Fatal(err)
	}
	sat, rate, retrans := 0.97, 22.1, 0.25
	acked, recv, cwnd := int64(1000), int64(4000), int64(10)
	want := Telemetry{
		Schema: TelemetrySchema, CPEID: "cpe-0001", TimeMs: 1763800000000, IntervalMs: 1000,
		WATs: map[string]WATTelemetry{
			"nr": {Up: true, Subflows: 1, RTTMs: 21,
				UL: &DirTelemetry{DeliveredMbps: 20.5, BytesAcked: &acked, Cwnd: &cwnd, Saturated: &sat, DeliveryRateMbps: &rate, RetransPct: &retrans},
				DL: &DirTelemetry{DeliveredMbps: 80.25, BytesReceived: &recv}},
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
	if strings.Count(string(b), "saturated") != 1 || strings.Count(string(b), "retrans_pct") != 1 || strings.Count(string(b), "bytes_received") != 1 || strings.Count(string(b), `"dl"`) != 1 {
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
		return `{"schema":"mcw.telemetry.v2","cpe_id":"c","time_ms":1,"wats":{"nr":{"ul":{` + fields + `}}}}`
	}
	for name, doc := range map[string]string{
		"saturated above 1":       nr(`"saturated":1.01`),
		"saturated negative":      nr(`"saturated":-0.1`),
		"saturated a string":      nr(`"saturated":"1"`),
		"delivery rate negative":  nr(`"delivery_rate_mbps":-1`),
		"delivered negative":      nr(`"delivered_mbps":-1`),
		"rtt negative":            `{"schema":"mcw.telemetry.v2","cpe_id":"c","time_ms":1,"wats":{"nr":{"rtt_ms":-1}}}`,
		"subflows negative":       `{"schema":"mcw.telemetry.v2","cpe_id":"c","time_ms":1,"wats":{"nr":{"subflows":-1}}}`,
		"bytes received negative": nr(`"bytes_received":-1`),
		"unknown direction":       `{"schema":"mcw.telemetry.v2","cpe_id":"c","time_ms":1,"wats":{"nr":{"both":{}}}}`,
		"v1 flat fields":          `{"schema":"mcw.telemetry.v2","cpe_id":"c","time_ms":1,"wats":{"nr":{"delivered_mbps":1}}}`,
		"bad proxy_id":            `{"schema":"mcw.telemetry.v2","cpe_id":"c","proxy_id":"p/1","time_ms":1,"wats":{}}`,
		"cwnd negative":           nr(`"cwnd":-1`),
		"unknown per-WAT field":   nr(`"cwnd_limited":1`),
		"unknown WAT":             `{"schema":"mcw.telemetry.v2","cpe_id":"c","time_ms":1,"wats":{"5g":{}}}`,
		"wrong schema":            `{"schema":"mcw.weights.v1","cpe_id":"c","time_ms":1,"wats":{}}`,
		"missing cpe_id":          `{"schema":"mcw.telemetry.v2","time_ms":1,"wats":{}}`,
		"missing wats":            `{"schema":"mcw.telemetry.v2","cpe_id":"c","time_ms":1}`,
		"negative time":           `{"schema":"mcw.telemetry.v2","cpe_id":"c","time_ms":-1,"wats":{}}`,
		"trailing data":           validTelemetry + `{}`,
		"saturated overflows":     nr(`"saturated":1e999`),
		"retrans_pct above 100":   nr(`"retrans_pct":100.5`),
		"retrans_pct negative":    nr(`"retrans_pct":-1`),
		"retrans_pct a string":    nr(`"retrans_pct":"1%"`),
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
	for _, pct := range []string{"0", "100", "2.5"} {
		if _, err := ParseTelemetry([]byte(nr(`"retrans_pct":` + pct))); err != nil {
			t.Errorf("retrans_pct %s rejected: %v", pct, err)
		}
	}
}

// FuzzParseTelemetry checks that ParseTelemetry never panics and that what
// it accepts satisfies the per-WAT ranges and re-encodes to itself.
func FuzzParseTelemetry(f *testing.F) {
	f.Add([]byte(validTelemetry))
	f.Add([]byte(`{"schema":"mcw.telemetry.v2","cpe_id":"c","time_ms":1,"wats":{"nr":{"saturated":1}}}`))
	f.Add([]byte(`{"wats":{"nr":{"ul":{"saturated":-0}}}}`))
	f.Add([]byte(`{"schema":"mcw.telemetry.v2","cpe_id":"c","time_ms":1,"wats":{"wifi":{"ul":{"retrans_pct":100}}}}`))
	f.Add([]byte(`{"schema":"mcw.telemetry.v2","cpe_id":"c","proxy_id":"p","time_ms":1,"wats":{"lifi":{"dl":{"bytes_acked":5,"cwnd":0}}}}`))
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
