// Package dryrun is a backend that records what it would apply and touches
// nothing; it is the backend for trials on a machine without an MPTCP kernel
// and for tests of the agent's logic.
package dryrun

import (
	"context"
	"sync"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// Backend records every Apply call. It is safe for concurrent use.
type Backend struct {
	mu      sync.Mutex
	applied [][]backend.Path
	err     error
}

// SetErr makes every later Apply fail with err (nil: succeed), to test
// how the agent handles a kernel that refuses.
func (b *Backend) SetErr(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.err = err
}

// New returns an empty recorder.
func New() *Backend { return &Backend{} }

// Name implements backend.Local.
func (*Backend) Name() string { return payload.BackendDryRun }

// Capabilities implements backend.Local: the full WRR range.
func (*Backend) Capabilities() payload.Capabilities {
	return payload.Capabilities{MaxWeight: payload.MaxWeight, Semantics: payload.SemanticsWRR}
}

// Apply records paths.
func (b *Backend) Apply(_ context.Context, paths []backend.Path) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return b.err
	}
	b.applied = append(b.applied, append([]backend.Path(nil), paths...))
	return nil
}

// Applied returns a copy of every recorded Apply call, oldest first.
func (b *Backend) Applied() [][]backend.Path {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([][]backend.Path, len(b.applied))
	for i, p := range b.applied {
		out[i] = append([]backend.Path(nil), p...)
	}
	return out
}

// Last returns the weights of the latest Apply by WAT, or nil.
func (b *Backend) Last() payload.Weights {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.applied) == 0 {
		return nil
	}
	w := payload.Weights{}
	for _, p := range b.applied[len(b.applied)-1] {
		w[p.WAT] = p.Weight
	}
	return w
}

// Close implements backend.Local.
func (*Backend) Close() error { return nil }
