package supervisor

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// beating is a healthy worker: it beats until ctx ends.
func beating(ctx context.Context, beat func()) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		beat()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

type changes struct {
	mu  sync.Mutex
	got map[string]bool
}

func (c *changes) on(name string, up bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got[name] = up
}

func TestFailures(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	tests := []struct {
		name    string
		failing Worker
		wantErr error
		state   string
	}{
		{"returns early", Worker{Name: "w", Stall: time.Second, Run: func(context.Context, func()) error { return nil }}, ErrExited, StateDead},
		{"returns an error", Worker{Name: "w", Run: func(context.Context, func()) error { return errBoom }}, errBoom, StateDead},
		{"panics", Worker{Name: "w", Run: func(context.Context, func()) error { panic("boom") }}, ErrPanic, StateDead},
		{"stops beating", Worker{Name: "w", Stall: 50 * time.Millisecond, Run: func(ctx context.Context, beat func()) error {
			beat()
			<-ctx.Done()
			return nil
		}}, ErrStalled, StateStalled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := &changes{got: map[string]bool{}}
			s := New(Config{OnChange: ch.on, Grace: time.Second})
			s.Add(Worker{Name: "healthy", Stall: time.Second, Run: beating})
			s.Add(tt.failing)
			err := s.Run(context.Background())
			var werr *WorkerError
			if !errors.As(err, &werr) || werr.Worker != "w" || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Run = %v, want worker w failing with %v", err, tt.wantErr)
			}
			st := s.Status()
			if st[1].State != tt.state || st[1].Error == "" || st[0].State != StateStopped {
				t.Fatalf("Status = %+v", st)
			}
			if diff := cmp.Diff(map[string]bool{"healthy": false, "w": false}, ch.got); diff != "" {
				t.Fatalf("OnChange (-want +got):\n%s", diff)
			}
		})
	}
}

var errBoom = errors.New("boom")

// TestHealthFailsWhileStalled watches the health handler turn from 200 to
// 503 while a worker is stuck, before Run has returned.
func TestHealthFailsWhileStalled(t *testing.T) {
	release := make(chan struct{})
	s := New(Config{Grace: 2 * time.Second})
	s.Add(Worker{Name: "healthy", Stall: time.Second, Run: beating})
	stall := make(chan struct{})
	s.Add(Worker{Name: "stuck", Stall: 100 * time.Millisecond, Run: func(ctx context.Context, beat func()) error {
		for {
			beat()
			select {
			case <-stall:
				<-release // stuck: deaf to ctx, no beats
				return nil
			case <-ctx.Done():
				return nil
			case <-time.After(5 * time.Millisecond):
			}
		}
	}})
	code := func() int {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code
	}
	if got := code(); got != http.StatusServiceUnavailable {
		t.Fatalf("before Run: %d", got)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	if got := code(); got != http.StatusOK || s.Healthy() != nil {
		t.Fatalf("running: %d %v", got, s.Healthy())
	}
	close(stall)
	deadline := time.Now().Add(2 * time.Second)
	for code() != http.StatusServiceUnavailable {
		if time.Now().After(deadline) {
			t.Fatal("health never failed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	if err := <-done; !errors.Is(err, ErrStalled) {
		t.Fatalf("Run = %v", err)
	}
}

func TestGraceBoundsShutdown(t *testing.T) {
	s := New(Config{Grace: 50 * time.Millisecond})
	block := make(chan struct{})
	defer close(block)
	s.Add(Worker{Name: "deaf", Run: func(context.Context, func()) error { <-block; return nil }})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	t0 := time.Now()
	err := s.Run(ctx)
	if err == nil || time.Since(t0) > time.Second {
		t.Fatalf("Run = %v after %v, want the grace error", err, time.Since(t0))
	}
}

func TestCleanShutdown(t *testing.T) {
	s := New(Config{})
	s.Add(Worker{Name: "a", Stall: time.Second, Run: beating})
	s.Add(Worker{Name: "b", Run: func(ctx context.Context, _ func()) error { <-ctx.Done(); return nil }})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if err := s.Run(ctx); err == nil {
		t.Fatal("second Run accepted")
	}
}
