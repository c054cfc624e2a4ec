// Package payload parses and validates the JSON payloads of the mcw MQTT
// channel (mcw/v1/cpe/{cpe_id}/weights, mcw/v1/s/{shard}/cpe/{cpe_id}/state
// and .../telemetry).
//
// The rules are the same as the JSON Schemas in the repository's schemas/
// directory (mqtt-weights, mqtt-state, mqtt-telemetry); the Python side of the
// channel validates with those schemas, this package validates in Go without
// a schema engine so that the agent stays one small static binary.
package payload
