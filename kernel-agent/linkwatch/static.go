package linkwatch

import "context"

// Static is a link source whose interfaces never change: for benchmarks,
// the dry-run backend on a machine without the WAT interfaces, and tests.
type Static map[string]Status

// Start returns s as the initial state and channels that stay silent until
// ctx ends.
func (s Static) Start(ctx context.Context) (map[string]Status, <-chan Status, <-chan error, error) {
	initial := make(map[string]Status, len(s))
	for k, v := range s {
		initial[k] = v
	}
	return initial, make(chan Status), make(chan error), nil
}
