package telemetry

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcw-xapp/kernel-agent/payload"
)

var update = flag.Bool("update", false, "rewrite testdata/telemetry.golden.json")

// TestTelemetryGolden pins the JSON the agent publishes for one aggregated
// sample. The xApp's tests (tests/xapp/adapters/mqtt/test_subscriber.py) validate the
// same file against schemas/mqtt-telemetry.schema.json and map it into
// KpiFrame columns, so a field renamed on one side fails on the other.
// Rewrite with `go test ./telemetry -run Golden -update`.
func TestTelemetryGolden(t *testing.T) {
	nr, wifi := netip.MustParseAddr("10.31.1.1"), netip.MustParseAddr("10.31.2.1")
	wats := map[string]WATInfo{"nr": {Addr: nr, Up: true}, "wifi": {Addr: wifi, Up: true}, "lifi": {}}
	var a Aggregator
	recv := func(s Subflow, n uint64) Subflow { s.BytesRecv = n; return s }
	t0 := time.UnixMilli(1763800000000)
	a.Sample(t0, []Subflow{
		segments(recv(window(chronoSF(nr, 1, 0, 0, 0, 0, 0), 60, 1448, 25_000), 1_000), 10, 0),
		segments(window(chronoSF(wifi, 2, 0, 0, 0, 0, 0), 14, 1448, 30_000), 10, 0),
	}, wats)
	t1 := t0.Add(time.Second)
	got := a.Sample(t1, []Subflow{
		// nr: path-limited, 4.5 MB in the second, a standing queue, 32
		// of its 3200 data segments retransmitted.
		// dl as the receiver: 10 MB arrived on nr in the second.
		segments(recv(queued(window(chronoSF(nr, 1, 4_500_000, 1_000_000, 0, 0, 4_400_000), 60, 1448, 25_000), 1<<20), 10_001_000), 3_210, 32),
		// wifi: the trickle of a low WRR weight, busy but window barely
		// used, no loss.
		segments(window(chronoSF(wifi, 2, 100_000, 1_000_000, 0, 0, 100_000), 14, 1448, 30_000), 80, 0),
	}, wats)
	b, err := payload.Telemetry{CPEID: "cpe-0001", TimeMs: t1.UnixMilli(), IntervalMs: 1000, WATs: got}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := payload.ParseTelemetry(b); err != nil {
		t.Fatalf("the agent's own payload does not parse: %v\n%s", err, b)
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, b, "", "  "); err != nil {
		t.Fatal(err)
	}
	pretty.WriteByte('\n')
	path := filepath.Join("testdata", "telemetry.golden.json")
	if *update {
		if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(want, pretty.Bytes()) {
		t.Fatalf("telemetry JSON changed (run with -update if intended):\ngot:\n%s\nwant:\n%s", pretty.Bytes(), want)
	}
}
