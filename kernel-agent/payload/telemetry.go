package payload

import (
	"encoding/json"
	"fmt"
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
	for k := range t.WATs {
		if !KnownWAT(k) {
			return Telemetry{}, fmt.Errorf("%w: wats: unknown WAT %q", ErrInvalid, k)
		}
	}
	return t, nil
}
