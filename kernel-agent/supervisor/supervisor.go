// Package supervisor owns the agent's long-lived goroutines ("workers") and
// notices when one of them dies or stalls, so that nothing stops silently.
//
// A worker is a function that runs until its context ends and proves its
// progress by calling a heartbeat. A worker that returns (or panics) before
// the supervisor's context ends is dead; one that goes longer than its Stall
// without a heartbeat is stalled and counts as dead. The first dead worker
// ends the whole group: the supervisor cancels the others, waits for them
// for a bounded grace period and returns an error naming the worker, so the
// process exits non-zero and its service manager restarts it from its
// persisted state (a stuck goroutine cannot be killed in Go; restarting the
// process is the one reliable restart). Until then the health handler
// reports the failure.
package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Errors a WorkerError wraps; test with errors.Is.
var (
	// ErrExited: the worker returned nil before the supervisor stopped.
	ErrExited = errors.New("returned before shutdown")
	// ErrStalled: the worker went longer than its Stall without a heartbeat.
	ErrStalled = errors.New("stalled: no heartbeat")
	// ErrPanic: the worker panicked.
	ErrPanic = errors.New("panicked")
)

// WorkerError is the failure of one worker.
type WorkerError struct {
	Worker string
	Err    error
}

func (e *WorkerError) Error() string { return fmt.Sprintf("worker %s: %v", e.Worker, e.Err) }

// Unwrap returns the worker's error.
func (e *WorkerError) Unwrap() error { return e.Err }

// Worker is one long-lived goroutine.
type Worker struct {
	// Name identifies the worker in logs, health reports and metrics.
	Name string
	// Run does the work until ctx ends, then returns nil. It must call beat
	// at least once per Stall while it is healthy; beat is cheap and safe
	// for concurrent use.
	Run func(ctx context.Context, beat func()) error
	// Stall is how long Run may go without calling beat before the worker
	// counts as dead. Zero disables stall detection (for workers that only
	// wait, such as a watcher of another component's Done channel).
	Stall time.Duration
}

// Config configures a Supervisor.
type Config struct {
	// Log receives one line per failure; nil discards.
	Log *slog.Logger
	// OnChange, if not nil, is called when a worker starts (up true) and
	// when it dies, stalls or stops (up false), e.g. to set a metric.
	OnChange func(worker string, up bool)
	// Grace bounds how long Run waits for the workers to return once the
	// group stops; zero means 5 s.
	Grace time.Duration
}

// Worker states in Status.
const (
	StateRunning = "running"
	StateStopped = "stopped" // returned after the supervisor's context ended
	StateDead    = "dead"
	StateStalled = "stalled"
)

// Status is one worker's health.
type Status struct {
	Name  string `json:"name"`
	State string `json:"state"`
	// Error is why the worker is dead or stalled.
	Error string `json:"error,omitempty"`
	// SinceBeatMs is the time since the last heartbeat (or start).
	SinceBeatMs int64 `json:"since_beat_ms"`
	StallMs     int64 `json:"stall_ms,omitempty"`
}

type worker struct {
	Worker
	last atomic.Int64 // heartbeat, nanoseconds since the supervisor's start

	// guarded by Supervisor.mu
	state string
	err   error
}

// Supervisor runs a fixed set of workers. Add them, then call Run once;
// Status, Healthy and ServeHTTP are safe for concurrent use at any time.
type Supervisor struct {
	cfg   Config
	start time.Time

	mu      sync.Mutex
	workers []*worker
	running bool
	failed  chan *WorkerError
}

// New returns a Supervisor without workers.
func New(cfg Config) *Supervisor {
	if cfg.Grace <= 0 {
		cfg.Grace = 5 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Supervisor{cfg: cfg, start: time.Now(), failed: make(chan *WorkerError, 1)}
}

// Add registers w; it must be called before Run.
func (s *Supervisor) Add(w Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		panic("supervisor: Add after Run")
	}
	s.workers = append(s.workers, &worker{Worker: w, state: StateRunning})
}

func (s *Supervisor) now() int64 { return int64(time.Since(s.start)) }

// Run starts every worker and blocks until ctx ends (it then returns nil
// once all have returned) or a worker dies or stalls (it returns a
// *WorkerError). Either way it cancels the workers and waits at most the
// grace period for them; workers still running after it are reported in the
// error and left behind (the caller is expected to exit).
func (s *Supervisor) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return errors.New("supervisor: Run called twice")
	}
	s.running = true
	workers := s.workers
	s.mu.Unlock()

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, w := range workers {
		w.last.Store(s.now())
		s.onChange(w.Name, true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.runOne(wctx, w)
			switch {
			case wctx.Err() != nil && err == nil:
				s.set(w, StateStopped, nil)
			case err == nil:
				s.fail(w, StateDead, ErrExited)
			default:
				s.fail(w, StateDead, err)
			}
		}()
	}
	stopWatch := make(chan struct{})
	var watchWG sync.WaitGroup
	watchWG.Add(1)
	go func() { defer watchWG.Done(); s.watch(workers, stopWatch) }()

	var runErr error
	select {
	case <-ctx.Done():
	case werr := <-s.failed:
		runErr = werr
	}
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.Grace):
		var stuck []string
		s.mu.Lock()
		for _, w := range workers {
			if w.state == StateRunning || w.state == StateStalled {
				stuck = append(stuck, w.Name)
			}
		}
		s.mu.Unlock()
		runErr = errors.Join(runErr, fmt.Errorf("supervisor: workers %v did not stop within %v", stuck, s.cfg.Grace))
	}
	close(stopWatch)
	watchWG.Wait()
	return runErr
}

// runOne runs w, turning a panic into an error.
func (s *Supervisor) runOne(ctx context.Context, w *worker) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v\n%s", ErrPanic, p, debug.Stack())
		}
	}()
	return w.Run(ctx, func() { w.last.Store(s.now()) })
}

// watch marks workers without a recent heartbeat as stalled.
func (s *Supervisor) watch(workers []*worker, stop <-chan struct{}) {
	period := time.Second
	for _, w := range workers {
		if w.Stall > 0 && w.Stall/4 < period {
			period = max(w.Stall/4, time.Millisecond)
		}
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := s.now()
		for _, w := range workers {
			if w.Stall <= 0 {
				continue
			}
			if age := time.Duration(now - w.last.Load()); age > w.Stall {
				s.fail(w, StateStalled, fmt.Errorf("%w for %v (limit %v)", ErrStalled, age.Round(time.Millisecond), w.Stall))
			}
		}
	}
}

// fail records a failure of a running worker and signals Run (once).
func (s *Supervisor) fail(w *worker, state string, err error) {
	s.mu.Lock()
	if w.state != StateRunning {
		s.mu.Unlock()
		return
	}
	w.state, w.err = state, err
	s.mu.Unlock()
	s.onChange(w.Name, false)
	s.cfg.Log.Error("worker failed", "worker", w.Name, "state", state, "err", err)
	select {
	case s.failed <- &WorkerError{Worker: w.Name, Err: err}:
	default: // Run already has a failure to report
	}
}

func (s *Supervisor) set(w *worker, state string, err error) {
	s.mu.Lock()
	changed := w.state == StateRunning
	if changed {
		w.state, w.err = state, err
	}
	s.mu.Unlock()
	if changed {
		s.onChange(w.Name, false)
	}
}

func (s *Supervisor) onChange(name string, up bool) {
	if s.cfg.OnChange != nil {
		s.cfg.OnChange(name, up)
	}
}

// Status returns every worker's health in the order they were added.
func (s *Supervisor) Status() []Status {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Status, 0, len(s.workers))
	for _, w := range s.workers {
		st := Status{Name: w.Name, State: w.state, StallMs: w.Stall.Milliseconds(),
			SinceBeatMs: time.Duration(now - w.last.Load()).Milliseconds()}
		if !s.running {
			st.State, st.SinceBeatMs = "not started", 0
		}
		if w.err != nil {
			st.Error = w.err.Error()
		}
		out = append(out, st)
	}
	return out
}

// Healthy returns nil when Run is running and every worker is running,
// otherwise an error naming the workers that are not.
func (s *Supervisor) Healthy() error {
	var errs []error
	for _, st := range s.Status() {
		if st.State != StateRunning {
			errs = append(errs, fmt.Errorf("worker %s: %s %s", st.Name, st.State, st.Error))
		}
	}
	return errors.Join(errs...)
}

// ServeHTTP answers a health probe: 200 when Healthy, 503 otherwise, with
// the workers' Status as JSON either way.
func (s *Supervisor) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	st := s.Status()
	ok := s.Healthy() == nil
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	json.NewEncoder(w).Encode(struct {
		OK      bool     `json:"ok"`
		Workers []Status `json:"workers"`
	}{ok, st})
}
