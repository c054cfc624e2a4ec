package mptcpshares

import (
	"strings"
	"testing"

	"github.com/mcw-xapp/kernel-agent/backend"
)

func TestCaps(t *testing.T) {
	links := map[string]float64{"nr": 24, "wifi": 16, "lifi": 8}
	for name, tc := range map[string]struct {
		weights map[string]int
		want    map[string]uint64
		err     string
	}{
		// Proportional to the link rates: every WAT's share is its link.
		"load balancing": {map[string]int{"nr": 24, "wifi": 16, "lifi": 8}, map[string]uint64{"nr": 0, "wifi": 0, "lifi": 0}, ""},
		// T = min(24*3, 16*3, 8*3) = 24: lifi binds, the others get 8.
		"equal": {map[string]int{"nr": 1, "wifi": 1, "lifi": 1}, map[string]uint64{"nr": 8e6, "wifi": 8e6, "lifi": 0}, ""},
		// T = min(24/0.7, 16/0.3) = 34.29: nr binds, wifi 10.29.
		"70/30": {map[string]int{"nr": 70, "wifi": 30}, map[string]uint64{"nr": 0, "wifi": 10285714}, ""},
		"off":   {map[string]int{"nr": 3, "wifi": 0, "lifi": 1}, map[string]uint64{"nr": 0, "wifi": 0, "lifi": 0}, ""},
		// nr binds at 24 (T = 24*255/254); lifi's share is tiny but above
		// HTB's floor.
		"tiny share": {map[string]int{"nr": 254, "lifi": 1}, map[string]uint64{"nr": 0, "lifi": 94488}, ""},
		"all zero":   {map[string]int{"nr": 0, "wifi": 0}, nil, "every weight is 0"},
		"no rate":    {map[string]int{"nr": 1, "lte": 1}, nil, "no link rate configured for lte"},
		"negative":   {map[string]int{"nr": -1, "wifi": 2}, nil, "out of"},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := New(nil, nil, links, nil)
			if err != nil {
				t.Fatal(err)
			}
			var paths []backend.Path
			for wat, w := range tc.weights {
				paths = append(paths, backend.Path{WAT: wat, Weight: w})
			}
			got, err := b.Caps(paths)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for wat, w := range tc.want {
				if d := int64(got[wat]) - int64(w); d > 1 || d < -1 {
					t.Errorf("%s: cap %d bit/s, want %d", wat, got[wat], w)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("caps %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNewRejectsRates(t *testing.T) {
	for name, rates := range map[string]map[string]float64{
		"zero":     {"nr": 0},
		"negative": {"nr": -3},
		"too fast": {"nr": MaxLinkMbps + 1},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(nil, nil, rates, nil); err == nil {
				t.Fatalf("rates %v accepted", rates)
			}
		})
	}
}
