package wrrsysctl

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseBounds(t *testing.T) {
	for name, text := range map[string]string{
		"too many tuples": strings.Repeat("0 0 0 0 0 ", MaxTuples+1),
		"too long":        strings.Repeat(" ", MaxTextBytes+1),
	} {
		if _, err := Parse(text); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Parse(strings.Repeat("0 0 0 0 0 ", MaxTuples)); err != nil {
		t.Errorf("MaxTuples tuples: %v", err)
	}
}

// FuzzParse checks that the read-back parser never panics, bounds what it
// accepts and that what it accepts formats back to the same tuples.
func FuzzParse(f *testing.F) {
	f.Add("335544330 0 30 0 0 335610122 0 100 0 0\n")
	f.Add("335544330\t0\t1\t20480\t0")
	f.Add("")
	f.Add("1 2 3 4")
	f.Add("4294967296 0 1 0 0")
	f.Add("1 1 256 1 1")
	f.Add("-1 0 1 0 0")
	f.Fuzz(func(t *testing.T, text string) {
		tuples, err := Parse(text)
		if err != nil {
			return
		}
		if len(text) > MaxTextBytes || len(tuples) > MaxTuples {
			t.Fatalf("accepted %d bytes, %d tuples", len(text), len(tuples))
		}
		out, err := Format(tuples)
		if err != nil {
			t.Fatalf("parsed tuples do not format: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("formatted tuples do not parse: %v\n%s", err, out)
		}
		if len(tuples) == 0 && len(again) == 0 {
			return
		}
		if diff := cmp.Diff(tuples, again, cmp.Comparer(func(a, b Tuple) bool { return a == b })); diff != "" {
			t.Fatalf("round trip (-first +again):\n%s", diff)
		}
	})
}
