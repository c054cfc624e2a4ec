package config

import (
	"os"
	"strings"
	"testing"

	"github.com/mcw-xapp/kernel-agent/payload"
)

// FuzzParse checks that the configuration loader never panics and that
// whatever it accepts is within its bounds and valid.
func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	if b, err := os.ReadFile("../deploy/agent.example.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(goodProxy))
	if b, err := os.ReadFile("../deploy/proxy.example.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(goodProxy + "cpes: [" + strings.Repeat("c,", 2000) + "c]\n"))
	f.Add([]byte(good + "lease: {max_clock_skew_ms: -1}\n"))
	f.Add([]byte(good + "telemetry: {interval_ms: 99999999999999999999}\n"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Add([]byte("wats: " + strings.Repeat("[", 50) + strings.Repeat("]", 50) + "\n"))
	f.Add([]byte("safe_weights: {nr: 1e3}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			return
		}
		if len(b) > MaxFileBytes {
			t.Fatalf("accepted %d bytes", len(b))
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted an invalid configuration: %v", err)
		}
		if c.IsProxy() && (len(c.CPEs) == 0 || len(c.CPEs) > MaxCPEs || !payload.ValidCPEID(c.ProxyID)) {
			t.Fatalf("accepted proxy configuration out of bounds: %d CPEs, id %q", len(c.CPEs), c.ProxyID)
		}
		if s := c.Lease.MaxClockSkew(); s < 0 || s.Milliseconds() > MaxClockSkewMs {
			t.Fatalf("skew %v out of bounds", s)
		}
	})
}
