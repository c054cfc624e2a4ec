package linkwatch

import (
	"context"
	"time"
)

// Static is a link source whose interfaces never change: for benchmarks,
// the dry-run backend on a machine without the WAT interfaces, and tests.
type Static map[string]Status

// Start returns a copy of s.
func (s Static) Start(context.Context) (map[string]Status, error) {
	initial := make(map[string]Status, len(s))
	for k, v := range s {
		initial[k] = v
	}
	return initial, nil
}

// Run sends nothing; it beats every second until ctx ends.
func (s Static) Run(ctx context.Context, _ chan<- Status, beat func()) error {
	t := time.NewTicker(time.Second)
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
