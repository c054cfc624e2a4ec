package dryrun

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/payload"
)

func TestRecords(t *testing.T) {
	b := New()
	if b.Last() != nil {
		t.Fatal("Last before any Apply")
	}
	paths := []backend.Path{{WAT: "nr", Weight: 3}, {WAT: "wifi", Weight: 0}}
	if err := b.Apply(context.Background(), paths); err != nil {
		t.Fatal(err)
	}
	paths[0].Weight = 99 // the recorder keeps its own copy
	if diff := cmp.Diff(payload.Weights{"nr": 3, "wifi": 0}, b.Last()); diff != "" {
		t.Fatalf("Last (-want +got):\n%s", diff)
	}
	boom := errors.New("boom")
	b.SetErr(boom)
	if err := b.Apply(context.Background(), paths); !errors.Is(err, boom) || len(b.Applied()) != 1 {
		t.Fatalf("Apply with SetErr: %v, %d records", err, len(b.Applied()))
	}
}
