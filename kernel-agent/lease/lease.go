// Package lease decides which weights updates the agent may apply and for
// how long: versions must grow (stale or replayed ones are ignored) and
// every accepted update holds for its lease, after which the agent falls
// back to its safe weights. The package is pure: the caller passes the
// clock.
package lease

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned by Tracker.Check; test with errors.Is.
var (
	// ErrReplay: the version equals the last accepted one (a retained
	// message delivered again on reconnect, or a duplicate).
	ErrReplay = errors.New("replayed version")
	// ErrStale: the version is below the last accepted one.
	ErrStale = errors.New("stale version")
)

// Tracker holds the highest accepted version and the current lease. The
// zero value accepts any version >= 1 and holds no lease. It is not safe
// for concurrent use.
type Tracker struct {
	version int64
	until   time.Time
	active  bool
}

// Restore sets the tracker from persisted state: version is the high-water
// mark, until the lease's end (a zero until means no lease).
func (t *Tracker) Restore(version int64, until time.Time) {
	t.version = version
	t.until = until
	t.active = !until.IsZero()
}

// Version returns the highest accepted version (0 before any).
func (t *Tracker) Version() int64 { return t.version }

// Check reports whether version may be applied.
func (t *Tracker) Check(version int64) error {
	switch {
	case version == t.version:
		return fmt.Errorf("version %d: %w", version, ErrReplay)
	case version < t.version:
		return fmt.Errorf("version %d < %d: %w", version, t.version, ErrStale)
	}
	return nil
}

// Grant records version as accepted at now with a lease of seconds.
func (t *Tracker) Grant(version int64, seconds float64, now time.Time) {
	t.version = version
	t.until = now.Add(time.Duration(seconds * float64(time.Second)))
	t.active = true
}

// Active reports whether a lease is held (granted and not yet expired
// through Expire).
func (t *Tracker) Active() bool { return t.active }

// Until returns the end of the current lease (zero when none).
func (t *Tracker) Until() time.Time {
	if !t.active {
		return time.Time{}
	}
	return t.until
}

// Remaining returns how long the lease still holds at now (0 when it has
// run out or none is held).
func (t *Tracker) Remaining(now time.Time) time.Duration {
	if !t.active {
		return 0
	}
	if d := t.until.Sub(now); d > 0 {
		return d
	}
	return 0
}

// Expire ends the lease; the version high-water mark stays, so the expired
// update cannot be replayed.
func (t *Tracker) Expire() { t.active = false; t.until = time.Time{} }
