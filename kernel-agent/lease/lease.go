// Package lease decides which weights updates the agent may apply and for
// how long. Versions must grow (stale or replayed ones are refused), may not
// jump further than MaxVersionJump and must leave room for later versions;
// every accepted update holds until its issue time plus its lease, by the
// CPE's clock, after which the agent falls back to its safe weights. The
// package is pure: the caller passes the clock.
package lease

import (
	"errors"
	"fmt"
	"time"
)

// Version bounds. Versions travel as JSON numbers, exact only up to
// 2^53-1, and the agent persists the highest one it accepted, so one
// accepted version near 2^53 would lock the CPE out of every later update.
const (
	// MaxSafeVersion is the largest version a JSON number carries exactly.
	MaxSafeVersion = 1<<53 - 1
	// MaxVersionJump is how far a version may lie above the highest one
	// accepted before. The xApp counts up by 1 per publish and, after a
	// restart, skips at most one reserved block (100 versions by default,
	// see xapp/adapters/mqtt/versions.py); 2^32 publishes take over 13
	// years at 10 per second, so no legitimate sequence comes near it.
	MaxVersionJump = 1 << 32
	// MaxVersion is the highest version accepted at all, even without a
	// previous one: above it fewer than MaxVersionJump versions would be
	// left for later updates.
	MaxVersion = MaxSafeVersion - MaxVersionJump
)

// Errors returned by Tracker.Check; test with errors.Is.
var (
	// ErrReplay: the version equals the last accepted one (a retained
	// message delivered again on reconnect, or a duplicate).
	ErrReplay = errors.New("replayed version")
	// ErrStale: the version is below the last accepted one.
	ErrStale = errors.New("stale version")
	// ErrVersionBound: the version jumps more than MaxVersionJump above
	// the last accepted one, or exceeds MaxVersion.
	ErrVersionBound = errors.New("version out of bounds")
	// ErrFuture: the update was issued later than the CPE's clock plus
	// the allowed clock skew.
	ErrFuture = errors.New("issued in the future")
	// ErrExpired: the update's lease ended before it could be applied.
	ErrExpired = errors.New("lease already expired")
)

// Config configures a Tracker.
type Config struct {
	// MaxClockSkew is how far an update's issue time may lie ahead of the
	// CPE's clock; an update issued later than that is refused. Zero
	// allows no skew.
	MaxClockSkew time.Duration
}

// Update is what the tracker needs to know of a weights update.
type Update struct {
	Version  int64
	IssuedAt time.Time
	Lease    time.Duration
}

// Tracker holds the highest accepted version and the current lease. The
// zero value allows no clock skew, accepts any version in [1, MaxVersion]
// and holds no lease. It is not safe for concurrent use.
type Tracker struct {
	cfg     Config
	version int64
	until   time.Time
	active  bool
}

// New returns a Tracker with cfg.
func New(cfg Config) *Tracker { return &Tracker{cfg: cfg} }

// Restore sets the tracker from persisted state: version is the high-water
// mark, until the lease's end (a zero until means no lease).
func (t *Tracker) Restore(version int64, until time.Time) {
	t.version = version
	t.until = until
	t.active = !until.IsZero()
}

// Version returns the highest accepted version (0 before any).
func (t *Tracker) Version() int64 { return t.version }

// Check reports whether u may be applied at now and returns the end of its
// lease: u's issue time plus its lease, but never later than now plus its
// lease (an issue time within the skew allowance ahead of the CPE's clock
// earns no extra time). The version checks come first, so that a replay is
// reported as ErrReplay whatever its lease. When there is no previous
// version (no saved state), any version up to MaxVersion passes the jump
// bound: the first update sets the reference.
func (t *Tracker) Check(u Update, now time.Time) (until time.Time, err error) {
	switch {
	case u.Version == t.version:
		return time.Time{}, fmt.Errorf("version %d: %w", u.Version, ErrReplay)
	case u.Version < t.version:
		return time.Time{}, fmt.Errorf("version %d < %d: %w", u.Version, t.version, ErrStale)
	case u.Version > MaxVersion:
		return time.Time{}, fmt.Errorf("version %d above %d leaves no room for later versions: %w", u.Version, int64(MaxVersion), ErrVersionBound)
	case t.version > 0 && u.Version-t.version > MaxVersionJump:
		return time.Time{}, fmt.Errorf("version %d jumps %d above %d, at most %d: %w", u.Version, u.Version-t.version, t.version, int64(MaxVersionJump), ErrVersionBound)
	}
	if ahead := u.IssuedAt.Sub(now); ahead > t.cfg.MaxClockSkew {
		return time.Time{}, fmt.Errorf("version %d issued %v ahead of this CPE's clock, more than the allowed skew of %v: %w",
			u.Version, ahead.Round(time.Millisecond), t.cfg.MaxClockSkew, ErrFuture)
	}
	until = u.IssuedAt.Add(u.Lease)
	if late := now.Add(u.Lease); until.After(late) {
		until = late
	}
	if !until.After(now) {
		return until, fmt.Errorf("version %d: lease of %v issued at %s ended %v ago: %w", u.Version, u.Lease,
			u.IssuedAt.UTC().Format(time.RFC3339Nano), now.Sub(until).Round(time.Millisecond), ErrExpired)
	}
	return until, nil
}

// Grant records version as accepted with a lease until until (as returned
// by Check).
func (t *Tracker) Grant(version int64, until time.Time) {
	t.version = version
	t.until = until
	t.active = true
}

// Supersede records version as accepted without a lease: an update that
// passed the version checks but whose lease had already ended. Any lease
// held ends (the newer update replaces it), and replays of version are
// ignored from now on.
func (t *Tracker) Supersede(version int64) {
	t.version = version
	t.Expire()
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
