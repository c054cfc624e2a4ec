package payload

import (
	"encoding/json"
	"fmt"
	"math"
)

// TelemetrySchema is the value of the "schema" key of a telemetry payload.
const TelemetrySchema = "mcw.telemetry.v1"

// WATTelemetry is one WAT's share of a telemetry sample, summed over the
// kernel's TCP subflows whose source address is the WAT's address.
type WATTelemetry struct {
	DeliveredMbps float64 `json:"delivered_mbps"`
	RTTMs         float64 `json:"rtt_ms"`
	Cwnd          int64   `json:"cwnd"`
	BytesAcked    int64   `json:"bytes_acked"`
	Subflows      int     `json:"subflows"`
	Up            bool    `json:"up"`
	// Saturated is the fraction (0..1) of the interval the WAT's subflows
	// were limited by their congestion window, i.e. by the path, weighted
	// by the bytes each delivered: how much of DeliveredMbps measures
	// capacity rather than the share the scheduler gave the WAT. Nil means
	// unknown (first sample, or a kernel without tcp_info chrono times).
	Saturated *float64 `json:"saturated,omitempty"`
	// DeliveryRateMbps is the sum of the kernel's latest delivery-rate
	// samples (tcpi_delivery_rate) of the subflows that delivered data in
	// the interval; nil when none did.
	DeliveryRateMbps *float64 `json:"delivery_rate_mbps,omitempty"`
}

// Validate checks the ranges of the schema's per-WAT object.
func (w WATTelemetry) Validate() error {
	nonNeg := func(name string, v float64) error {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("%w: %s %v: want a finite number >= 0", ErrInvalid, name, v)
		}
		return nil
	}
	for _, c := range []struct {
		name string
		v    float64
	}{{"delivered_mbps", w.DeliveredMbps}, {"rtt_ms", w.RTTMs}, {"cwnd", float64(w.Cwnd)}, {"bytes_acked", float64(w.BytesAcked)}, {"subflows", float64(w.Subflows)}} {
		if err := nonNeg(c.name, c.v); err != nil {
			return err
		}
	}
	if w.Saturated != nil {
		if err := nonNeg("saturated", *w.Saturated); err != nil {
			return err
		}
		if *w.Saturated > 1 {
			return fmt.Errorf("%w: saturated %v: want 0..1", ErrInvalid, *w.Saturated)
		}
	}
	if w.DeliveryRateMbps != nil {
		if err := nonNeg("delivery_rate_mbps", *w.DeliveryRateMbps); err != nil {
			return err
		}
	}
	return nil
}

// Telemetry is the agent's stream on mcw/v1/cpe/{cpe_id}/telemetry (QoS 0).
type Telemetry struct {
	Schema     string                  `json:"schema"`
	CPEID      string                  `json:"cpe_id"`
	TimeMs     int64                   `json:"time_ms"`
	IntervalMs int64                   `json:"interval_ms"`
	WATs       map[string]WATTelemetry `json:"wats"`
}

// Marshal encodes t with its schema set.
func (t Telemetry) Marshal() ([]byte, error) {
	t.Schema = TelemetrySchema
	if t.WATs == nil {
		t.WATs = map[string]WATTelemetry{}
	}
	b, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("marshal telemetry: %w", err)
	}
	return b, nil
}

// ParseTelemetry decodes a telemetry payload, refusing unknown keys.
func ParseTelemetry(data []byte) (Telemetry, error) {
	var t Telemetry
	if err := decodeStrict(data, &t); err != nil {
		return Telemetry{}, err
	}
	if t.Schema != TelemetrySchema {
		return Telemetry{}, fmt.Errorf("%w: schema: want %q", ErrInvalid, TelemetrySchema)
	}
	switch {
	case t.CPEID == "":
		return Telemetry{}, fmt.Errorf("%w: cpe_id: missing", ErrInvalid)
	case t.TimeMs < 0 || t.IntervalMs < 0:
		return Telemetry{}, fmt.Errorf("%w: time_ms %d, interval_ms %d: want >= 0", ErrInvalid, t.TimeMs, t.IntervalMs)
	case t.WATs == nil:
		return Telemetry{}, fmt.Errorf("%w: wats: missing", ErrInvalid)
	}
	for k, w := range t.WATs {
		if !KnownWAT(k) {
			return Telemetry{}, fmt.Errorf("%w: wats: unknown WAT %q", ErrInvalid, k)
		}
		if err := w.Validate(); err != nil {
			return Telemetry{}, fmt.Errorf("wats: %s: %w", k, err)
		}
	}
	return t, nil
}
