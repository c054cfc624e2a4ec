package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"testing"

	"github.com/mcw-xapp/kernel-agent/config"
	"github.com/mcw-xapp/kernel-agent/payload"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestUnknownBackendSameErrorInBothRoles: a name the agent has no backend
// for is refused, with one error, whatever the role (the CPE role once
// fell back to dry-run silently).
func TestUnknownBackendSameErrorInBothRoles(t *testing.T) {
	for _, tt := range []struct{ name, backend string }{
		{"unknown", "bpf"},
		{"empty", ""},
		{"another case", "Dry-Run"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			errs := map[string]error{}
			for _, role := range []string{payload.RoleCPE, payload.RoleProxy} {
				b, err := openBackend(context.Background(), config.Config{Role: role, Backend: tt.backend}, discard)
				if !errors.Is(err, errUnknownBackend) {
					t.Fatalf("role %s: openBackend(%q) = %v, %v; want %v", role, tt.backend, b, err, errUnknownBackend)
				}
				errs[role] = err
			}
			if cpe, proxy := errs[payload.RoleCPE].Error(), errs[payload.RoleProxy].Error(); cpe != proxy {
				t.Errorf("role cpe: %q, role proxy: %q; want one error", cpe, proxy)
			}
		})
	}
}

// TestBackendsAreTheVocabulary: the agent runs exactly the backends a
// state payload may name, each in both roles.
func TestBackendsAreTheVocabulary(t *testing.T) {
	got, want := slices.Sorted(maps.Keys(backends)), slices.Sorted(slices.Values(payload.Backends()))
	if !slices.Equal(got, want) {
		t.Fatalf("backends %v, payload.Backends %v", got, want)
	}
	for name, o := range backends {
		if o.cpe == nil || o.proxy == nil {
			t.Errorf("backend %s: an opener per role, got cpe %t proxy %t", name, o.cpe != nil, o.proxy != nil)
		}
	}
}

// TestOpenDryRun: the table's row is the backend it names, in both roles
// (dry-run is the one that opens without a kernel).
func TestOpenDryRun(t *testing.T) {
	for _, role := range []string{payload.RoleCPE, payload.RoleProxy} {
		b, err := openBackend(context.Background(), config.Config{Role: role, Backend: payload.BackendDryRun}, discard)
		if err != nil {
			t.Fatalf("role %s: %v", role, err)
		}
		if b.Name() != payload.BackendDryRun {
			t.Errorf("role %s: backend %s, want %s", role, b.Name(), payload.BackendDryRun)
		}
		if err := b.Close(); err != nil {
			t.Errorf("role %s: close: %v", role, err)
		}
	}
}
