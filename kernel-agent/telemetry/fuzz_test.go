package telemetry

import (
	"testing"
)

// FuzzParseMessage checks that the sock_diag decoder never panics on any
// bytes, and that what it accepts came from a message within its bounds.
func FuzzParseMessage(f *testing.F) {
	ti := tcpInfo{rttUs: 12000, cwnd: 10, acked: 1 << 20, rate: 5_000_000, busy: 1000, rwnd: 100, mss: 1448}
	f.Add(fixture("10.31.1.1", "10.31.1.2", 40000, 5201, 7, ti, "mptcp"))
	f.Add(fixture("10.31.2.1", "10.31.2.2", 40001, 5201, 8, ti, ""))
	f.Add(fixtureSized("10.31.1.1", "10.31.1.2", 1, 2, 3, minTCPInfoLen, ti, "tls"))
	f.Add(make([]byte, sizeofDiagMsg))
	f.Add(append(make([]byte, sizeofDiagMsg), 4, 0, 2, 0))
	f.Add(append(make([]byte, sizeofDiagMsg), 0xff, 0xff, 19, 0x80))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseMessage(b)
		if err != nil {
			return
		}
		if len(b) < sizeofDiagMsg || len(b) > maxMessageBytes {
			t.Fatalf("accepted a message of %d bytes", len(b))
		}
		if s.HasChrono && s.PathLimitedMicros() > s.BusyMicros {
			t.Fatalf("path-limited time %d above busy time %d", s.PathLimitedMicros(), s.BusyMicros)
		}
	})
}
