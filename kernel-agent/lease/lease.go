// Package lease decides which weights updates the agent may apply and for
// how long; both roles (CPE and proxy) call it, so the rule is written once.
//
// The rule: updates are ordered by their mark, the xApp's issue time first
// and the version second. A mark must be above the last one applied (an
// equal one is a replay, a lower one stale); the issue time may lie at most
// the allowed clock skew ahead of this device's clock, and the lease must
// not have ended. So the step by which the mark can advance is bounded by
// the device's own clock: no update the xApp's certificate signed, today or
// yesterday, can put the mark further ahead than now plus the skew, and an
// xApp that restarts with an empty store (versions from 1 again) is
// accepted at once because it issues later. A refused update changes
// nothing: not the mark, not the lease. Every accepted update holds until
// its issue time plus its lease, never later than now plus its lease. The
// package is pure: the caller passes the clock.
package lease

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned by Tracker.Check; test with errors.Is.
var (
	// ErrReplay: the mark equals the last applied one (a retained message
	// delivered again on reconnect, or a duplicate).
	ErrReplay = errors.New("replayed update")
	// ErrStale: the mark is below the last applied one.
	ErrStale = errors.New("stale update")
	// ErrFuture: the update was issued later than the device's clock plus
	// the allowed clock skew.
	ErrFuture = errors.New("issued in the future")
	// ErrExpired: the update's lease ended before it could be applied.
	ErrExpired = errors.New("lease already expired")
)

// Config configures a Tracker.
type Config struct {
	// MaxClockSkew is how far an update's issue time may lie ahead of the
	// device's clock; an update issued later than that is refused. Zero
	// allows no skew.
	MaxClockSkew time.Duration
}

// Mark orders updates: the issue time (Unix milliseconds) of the xApp's
// clock first, the version among updates issued in the same millisecond.
type Mark struct {
	IssuedMs int64
	Version  int64
}

// Less reports whether m orders before o.
func (m Mark) Less(o Mark) bool {
	if m.IssuedMs != o.IssuedMs {
		return m.IssuedMs < o.IssuedMs
	}
	return m.Version < o.Version
}

// Update is what the tracker needs to know of a weights update.
type Update struct {
	Version  int64
	IssuedAt time.Time
	Lease    time.Duration
}

// Mark returns u's mark.
func (u Update) Mark() Mark { return Mark{IssuedMs: u.IssuedAt.UnixMilli(), Version: u.Version} }

// Tracker holds the last applied mark and the current lease. The zero value
// allows no clock skew, has applied nothing and holds no lease. It is not
// safe for concurrent use.
type Tracker struct {
	cfg    Config
	mark   Mark
	until  time.Time
	active bool
	// staged is an update accepted by Check and waiting to be applied
	// (hasStaged): later updates are ordered after it, but nothing else
	// changes until Grant.
	staged    Mark
	hasStaged bool
}

// New returns a Tracker with cfg.
func New(cfg Config) *Tracker { return &Tracker{cfg: cfg} }

// Restore sets the tracker from persisted state: m is the last applied mark,
// until the lease's end (a zero until means no lease). A mark issued beyond
// now plus the skew cannot have been applied under this rule (a file of an
// older agent, or a clock stepped back): it is dropped, with its lease, so
// that it cannot lock the device out; Restore reports whether it kept m.
func (t *Tracker) Restore(m Mark, until, now time.Time) bool {
	if time.UnixMilli(m.IssuedMs).Sub(now) > t.cfg.MaxClockSkew {
		t.mark, t.until, t.active = Mark{}, time.Time{}, false
		return false
	}
	t.mark = m
	t.until = until
	t.active = !until.IsZero()
	return true
}

// Version returns the last applied version (0 before any).
func (t *Tracker) Version() int64 { return t.mark.Version }

// Mark returns the last applied mark.
func (t *Tracker) Mark() Mark { return t.mark }

// Check reports whether u may be applied at now and returns the end of its
// lease. The order checks come first, so that a replay is reported as
// ErrReplay whatever its lease. Check changes nothing; Grant records.
func (t *Tracker) Check(u Update, now time.Time) (until time.Time, err error) {
	m, last := u.Mark(), t.mark
	if t.hasStaged {
		last = t.staged
	}
	switch {
	case m == last:
		return time.Time{}, fmt.Errorf("version %d issued at %d ms: %w", u.Version, m.IssuedMs, ErrReplay)
	case m.Less(last):
		return time.Time{}, fmt.Errorf("version %d issued at %d ms is older than version %d issued at %d ms: %w",
			u.Version, m.IssuedMs, last.Version, last.IssuedMs, ErrStale)
	}
	if ahead := u.IssuedAt.Sub(now); ahead > t.cfg.MaxClockSkew {
		return time.Time{}, fmt.Errorf("version %d issued %v ahead of this device's clock, more than the allowed skew of %v: %w",
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

// Grant records m as applied with a lease until until (as returned by Check).
func (t *Tracker) Grant(m Mark, until time.Time) {
	t.mark = m
	t.until = until
	t.active = true
	t.hasStaged = false
}

// Stage holds m, accepted by Check, while it is being applied: a copy of it
// is then a replay and an older update stale, but the mark, the version and
// the lease stay those of the last granted update until Grant records m,
// or Abort forgets it (the kernel refused it: its redelivery is judged
// afresh). A later Stage replaces an earlier one.
func (t *Tracker) Stage(m Mark) { t.staged, t.hasStaged = m, true }

// Abort forgets the staged update.
func (t *Tracker) Abort() { t.staged, t.hasStaged = Mark{}, false }

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

// Expire ends the lease; the mark stays, so the expired update cannot be
// replayed.
func (t *Tracker) Expire() { t.active = false; t.until = time.Time{} }

// Result names err's refusal as the agent's update metrics label it:
// replay, stale, future or expired ("" for nil, "invalid" for another).
func Result(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrReplay):
		return "replay"
	case errors.Is(err, ErrStale):
		return "stale"
	case errors.Is(err, ErrFuture):
		return "future"
	case errors.Is(err, ErrExpired):
		return "expired"
	}
	return "invalid"
}
