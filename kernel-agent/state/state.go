// Package state persists what the agent last applied, so that a restart
// neither reuses nor replays a version and resumes a lease still running.
// Writes are atomic: a temporary file in the same directory is written,
// fsynced and renamed over the old one, then the directory is fsynced.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mcw-xapp/kernel-agent/payload"
)

// FileName is the state file inside the state directory.
const FileName = "applied.json"

// Record is the persisted state.
type Record struct {
	// Version is the highest accepted weights version.
	Version int64 `json:"version"`
	// Weights are the requested weights of Version (before local link
	// reactions), or nil when safe weights are in force.
	Weights payload.Weights `json:"weights,omitempty"`
	Mode    string          `json:"mode,omitempty"`
	// LeaseUntilMs is the lease's end in Unix milliseconds; 0 when none.
	LeaseUntilMs int64 `json:"lease_until_ms"`
	// SavedAtMs is when the record was written.
	SavedAtMs int64 `json:"saved_at_ms"`
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
	b, err := os.ReadFile(s.Path())
	if errors.Is(err, os.ErrNotExist) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("load state: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, false, fmt.Errorf("load state %s: %w", s.Path(), err)
	}
	if r.Version < 0 || (r.Weights != nil && r.Weights.Validate() != nil) {
		return Record{}, false, fmt.Errorf("load state %s: invalid record", s.Path())
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
