package payload

import (
	"encoding/json"
	"fmt"
)

// StateSchema is the value of the "schema" key of a state payload.
const StateSchema = "mcw.state.v1"

// Backend names as they appear in state payloads.
const (
	BackendWRRSysctl     = "wrr-sysctl"
	BackendMPTCPUpstream = "mptcp-upstream"
	BackendDryRun        = "dry-run"
)

// Events a state payload reports.
const (
	EventApplied      = "applied"
	EventRejected     = "rejected"
	EventLeaseExpired = "lease-expired"
	EventLinkDown     = "link-down"
	EventLinkUp       = "link-up"
	EventRestored     = "restored"
	EventStarted      = "started"
)

// Capabilities tells the xApp what the agent's backend can express.
type Capabilities struct {
	MaxWeight int  `json:"max_weight"`
	OnOffOnly bool `json:"on_off_only"`
}

// State is the agent's retained report on mcw/v1/cpe/{cpe_id}/state. The
// last will is the same object with only schema, cpe_id and online=false,
// which Offline builds.
type State struct {
	Schema         string            `json:"schema"`
	CPEID          string            `json:"cpe_id"`
	Online         bool              `json:"online"`
	TimeMs         int64             `json:"time_ms"`
	AppliedVersion int64             `json:"applied_version"`
	AppliedWeights Weights           `json:"applied_weights"`
	Backend        string            `json:"backend"`
	Capabilities   Capabilities      `json:"capabilities"`
	Links          map[string]string `json:"links"`
	Event          string            `json:"event"`
	LastError      string            `json:"last_error"`
}

// Marshal encodes s with its schema set.
func (s State) Marshal() ([]byte, error) {
	s.Schema = StateSchema
	if s.AppliedWeights == nil {
		s.AppliedWeights = Weights{}
	}
	if s.Links == nil {
		s.Links = map[string]string{}
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("marshal state: %w", err)
	}
	return b, nil
}

// Offline returns the last-will payload for cpeID.
func Offline(cpeID string) []byte {
	b, _ := json.Marshal(struct {
		Schema string `json:"schema"`
		CPEID  string `json:"cpe_id"`
		Online bool   `json:"online"`
	}{StateSchema, cpeID, false})
	return b
}

// ParseState decodes a state payload (used by tests and tools that watch the
// agent); it checks the schema key and refuses unknown keys.
func ParseState(data []byte) (State, error) {
	var s State
	if err := decodeStrict(data, &s); err != nil {
		return State{}, err
	}
	if s.Schema != StateSchema {
		return State{}, fmt.Errorf("%w: schema: want %q", ErrInvalid, StateSchema)
	}
	return s, nil
}
