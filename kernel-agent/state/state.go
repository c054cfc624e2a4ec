// Package state persists what the agent last applied, so that a restart
// neither reuses nor replays a version and resumes a lease still running.
// Writes are atomic: a temporary file in the same directory is written,
// fsynced and renamed over the old one, then the directory is fsynced.
package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/mcw-xapp/kernel-agent/lease"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// FileName is the state file inside the state directory.
const FileName = "applied.json"

// Record is the persisted state.
type Record struct {
	// Version and IssuedAtMs are the last applied update's mark (see
	// lease.Mark); a record of an older agent has no issue time (0).
	Version    int64 `json:"version"`
	IssuedAtMs int64 `json:"issued_at_ms,omitempty"`
	// Weights are the requested weights of Version (before local link
	// reactions), or nil when safe weights are in force.
	Weights payload.Weights `json:"weights,omitempty"`
	Mode    string          `json:"mode,omitempty"`
	// CapsMbps are the caps_mbps of Version's set (rate-caps backends), so
	// that a restart restores the caps with the weights; nil when none.
	CapsMbps map[string]float64 `json:"caps_mbps,omitempty"`
	// Classes are the traffic classes of Version's set, in the message's
	// form; nil when none.
	Classes []payload.Class `json:"classes,omitempty"`
	// LeaseUntilMs is the lease's end in Unix milliseconds; 0 when none.
	LeaseUntilMs int64 `json:"lease_until_ms"`
	// SavedAtMs is when the record was written.
	SavedAtMs int64 `json:"saved_at_ms"`
}

// MaxFileBytes bounds the state file: a record is about 200 bytes, with
// traffic classes at most one direction's set of a payload (bounded by
// payload.MaxPayloadBytes) re-encoded, so a larger file is not one the
// agent wrote.
const MaxFileBytes = 4 * payload.MaxPayloadBytes

// maxSafeInt is the largest integer a JSON number carries exactly.
const maxSafeInt = 1<<53 - 1

// Decode parses a state file's content: one JSON object with the Record's
// keys only, numbers in [0, 2^53-1], valid weights, a known mode and valid
// classes. It checks the size before parsing.
func Decode(b []byte) (Record, error) {
	if len(b) > MaxFileBytes {
		return Record{}, fmt.Errorf("%d bytes, at most %d", len(b), MaxFileBytes)
	}
	var r Record
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Record{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Record{}, errors.New("trailing data after the record")
	}
	for _, n := range []int64{r.Version, r.IssuedAtMs, r.LeaseUntilMs, r.SavedAtMs} {
		if n < 0 || n > maxSafeInt {
			return Record{}, fmt.Errorf("number %d outside [0, 2^53-1]", n)
		}
	}
	if r.Weights != nil {
		if err := r.Weights.Validate(); err != nil {
			return Record{}, err
		}
	}
	if r.Mode != "" && !payload.KnownMode(r.Mode) {
		return Record{}, fmt.Errorf("unknown mode %q", r.Mode)
	}
	for wat, c := range r.CapsMbps {
		if !payload.KnownWAT(wat) || !(c > 0) || c > payload.MaxCapMbps {
			return Record{}, fmt.Errorf("caps_mbps: %s=%v: want a known WAT and (0, %d]", wat, c, payload.MaxCapMbps)
		}
	}
	if r.Classes != nil && (len(r.Classes) == 0 || r.Weights == nil) {
		return Record{}, errors.New("classes: empty, or without the weights of their set")
	}
	// The record does not say its direction: a class with a cgroup (the
	// uplink's only) was checked against its direction when received.
	if err := payload.ValidateClasses(payload.UL, r.Classes); err != nil {
		return Record{}, err
	}
	return r, nil
}

// Snapshot is the record of tr with the requested set in force; nil
// weights mean the safe weights are in force (no set, no lease saved).
func Snapshot(tr *lease.Tracker, weights payload.Weights, mode string, caps map[string]float64, classes []payload.Class, now time.Time) Record {
	m := tr.Mark()
	r := Record{Version: m.Version, IssuedAtMs: m.IssuedMs, SavedAtMs: now.UnixMilli()}
	if weights != nil {
		r.Weights, r.Mode, r.CapsMbps, r.Classes = weights, mode, caps, classes
		r.LeaseUntilMs = tr.Until().UnixMilli()
	}
	return r
}

// Resume restores tr from r at now (both roles, each device) and reports
// whether r's set is still in force: its lease runs past now. A mark from
// beyond the device's clock is dropped (lease.Tracker.Restore): kept is
// false then, and nothing of r is in force.
func Resume(tr *lease.Tracker, r Record, now time.Time) (inForce, kept bool) {
	until := time.UnixMilli(r.LeaseUntilMs)
	inForce = r.Weights != nil && r.LeaseUntilMs > 0 && until.After(now)
	if !inForce {
		until = time.Time{}
	}
	if !tr.Restore(lease.Mark{IssuedMs: r.IssuedAtMs, Version: r.Version}, until, now) {
		return false, false
	}
	return inForce, true
}

// Store reads and writes the record in one directory. It is not safe for
// concurrent use.
type Store struct {
	dir string
}

// New returns a Store in dir, creating dir (mode 0700) if needed.
func New(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return &Store{dir: dir}, nil
}

// Path returns the state file's path.
func (s *Store) Path() string { return filepath.Join(s.dir, FileName) }

// Load returns the persisted record; ok is false when there is none. A
// corrupt file is an error (the caller decides to start from safe weights).
func (s *Store) Load() (r Record, ok bool, err error) {
	f, err := os.Open(s.Path())
	if errors.Is(err, os.ErrNotExist) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("load state: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return Record{}, false, fmt.Errorf("load state: %w", err)
	}
	if r, err = Decode(b); err != nil {
		return Record{}, false, fmt.Errorf("load state %s: %w", s.Path(), err)
	}
	return r, true, nil
}

// Save writes r atomically.
func (s *Store) Save(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	if err := writeAtomic(s.dir, FileName, b); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}

func writeAtomic(dir, name string, b []byte) (err error) {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(b); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
