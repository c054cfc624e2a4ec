package payload

import (
	"encoding/json"
	"fmt"
	"math"
)

// TelemetrySchema is the value of the "schema" key of a telemetry payload.
const TelemetrySchema = "mcw.telemetry.v2"

// DirTelemetry is one direction of one WAT, summed over the WAT's
// subflows. The sending end (CPE for ul, proxy for dl) fills
// DeliveredMbps, BytesAcked, Cwnd, Saturated, DeliveryRateMbps and
// RetransPct; the receiving end DeliveredMbps and BytesReceived. Nil fields
// are unknown to the reporting end and absent from the JSON.
type DirTelemetry struct {
	DeliveredMbps float64 `json:"delivered_mbps"`
	// BytesAcked is the sender's cumulative tcpi_bytes_acked.
	BytesAcked *int64 `json:"bytes_acked,omitempty"`
	// BytesReceived is the receiver's cumulative tcpi_bytes_received.
	BytesReceived *int64 `json:"bytes_received,omitempty"`
	Cwnd          *int64 `json:"cwnd,omitempty"`
	// Saturated is the fraction (0..1) of the interval the WAT's subflows
	// were limited by the path, weighted by the bytes each delivered: how
	// much of DeliveredMbps measures capacity rather than the share the
	// scheduler gave the WAT (telemetry.Aggregator; a subflow through a
	// retransmission timeout counts 0); 0 when the agent's own rate cap or
	// floor held the WAT (telemetry.CappedFill, WATInfo.Floored), whose
	// delivered rate is then a lower bound of its capacity. Nil means
	// unknown (first sample, the receiving end, or a kernel without
	// tcp_info chrono times).
	Saturated *float64 `json:"saturated,omitempty"`
	// DeliveryRateMbps is the sum of the kernel's latest delivery-rate
	// samples (tcpi_delivery_rate) of the subflows that delivered data in
	// the interval; nil when none did.
	DeliveryRateMbps *float64 `json:"delivery_rate_mbps,omitempty"`
	// RetransPct is the percentage (0..100) of the data segments the
	// WAT's subflows sent in the interval that were retransmissions
	// (tcpi_total_retrans over tcpi_data_segs_out); nil when they sent
	// none.
	RetransPct *float64 `json:"retrans_pct,omitempty"`
}

// Validate checks the ranges of the schema's direction object.
func (d DirTelemetry) Validate() error {
	if err := nonNeg("delivered_mbps", d.DeliveredMbps); err != nil {
		return err
	}
	for name, p := range map[string]*int64{"bytes_acked": d.BytesAcked, "bytes_received": d.BytesReceived, "cwnd": d.Cwnd} {
		if p != nil && *p < 0 {
			return fmt.Errorf("%w: %s %d: want >= 0", ErrInvalid, name, *p)
		}
	}
	if d.Saturated != nil {
		if err := nonNeg("saturated", *d.Saturated); err != nil {
			return err
		}
		if *d.Saturated > 1 {
			return fmt.Errorf("%w: saturated %v: want 0..1", ErrInvalid, *d.Saturated)
		}
	}
	if d.DeliveryRateMbps != nil {
		if err := nonNeg("delivery_rate_mbps", *d.DeliveryRateMbps); err != nil {
			return err
		}
	}
	if d.RetransPct != nil {
		if err := nonNeg("retrans_pct", *d.RetransPct); err != nil {
			return err
		}
		if *d.RetransPct > 100 {
			return fmt.Errorf("%w: retrans_pct %v: want 0..100", ErrInvalid, *d.RetransPct)
		}
	}
	return nil
}

func nonNeg(name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("%w: %s %v: want a finite number >= 0", ErrInvalid, name, v)
	}
	return nil
}

// WATTelemetry is one WAT's share of a telemetry sample: the subflows the
// reporting end has on the WAT and each direction it sees.
type WATTelemetry struct {
	Up       bool    `json:"up"`
	Subflows int     `json:"subflows"`
	RTTMs    float64 `json:"rtt_ms"`
	// DL and UL are nil when the reporting end knows nothing of that
	// direction (a proxy reports dl only).
	DL *DirTelemetry `json:"dl,omitempty"`
	UL *DirTelemetry `json:"ul,omitempty"`
}

// Validate checks the ranges of the schema's per-WAT object.
func (w WATTelemetry) Validate() error {
	if w.Subflows < 0 {
		return fmt.Errorf("%w: subflows %d: want >= 0", ErrInvalid, w.Subflows)
	}
	if err := nonNeg("rtt_ms", w.RTTMs); err != nil {
		return err
	}
	for name, d := range map[string]*DirTelemetry{DL: w.DL, UL: w.UL} {
		if d == nil {
			continue
		}
		if err := d.Validate(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// Telemetry is a stream sample: a CPE agent's on
// mcw/v1/s/{shard}/cpe/{cpe_id}/telemetry, a proxy's per served CPE (with
// ProxyID) on mcw/v1/s/{shard}/proxy/{proxy_id}/cpe/{cpe_id}/telemetry
// (mqttclient.TopicsFor, ProxyTopicsFor). QoS 0.
type Telemetry struct {
	Schema     string                  `json:"schema"`
	CPEID      string                  `json:"cpe_id"`
	ProxyID    string                  `json:"proxy_id,omitempty"`
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
	case !ValidCPEID(t.CPEID):
		return Telemetry{}, fmt.Errorf("%w: cpe_id: missing or not an identifier", ErrInvalid)
	case t.ProxyID != "" && !ValidCPEID(t.ProxyID):
		return Telemetry{}, fmt.Errorf("%w: proxy_id: not an identifier", ErrInvalid)
	case t.TimeMs < 0 || t.TimeMs > maxSafeInt || t.IntervalMs < 0 || t.IntervalMs > 3_600_000:
		return Telemetry{}, fmt.Errorf("%w: time_ms %d, interval_ms %d: out of range", ErrInvalid, t.TimeMs, t.IntervalMs)
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
