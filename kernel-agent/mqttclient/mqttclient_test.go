package mqttclient

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The same vectors are in tests/xapp/core/test_shards.py: agent and xApp must
// put a CPE in the same shard.
func TestShardOf(t *testing.T) {
	for _, tt := range []struct {
		id    string
		hash  uint32
		shard int
	}{
		{"cpe-0001", 0xFB22A72F, 47},
		{"cpe-0002", 0xFC22A8C2, 2},
		{"cpe-0003", 0xFD22AA55, 21},
		{"cpe-10000", 0xB4D397A7, 39},
		{"a", 0xE40C292C, 44},
		{"Z9._-x", 0x94373E5E, 30},
	} {
		if got := ShardOf(tt.id, DefaultShards); got != tt.shard {
			t.Errorf("ShardOf(%q, 64) = %d, want %d", tt.id, got, tt.shard)
		}
		if got := ShardOf(tt.id, MaxShards); got != int(tt.hash%MaxShards) {
			t.Errorf("ShardOf(%q, %d) = %d, want %d", tt.id, MaxShards, got, tt.hash%MaxShards)
		}
		if got := ShardOf(tt.id, 1); got != 0 {
			t.Errorf("ShardOf(%q, 1) = %d", tt.id, got)
		}
	}
}

func TestShardOfPanicsOutOfRange(t *testing.T) {
	for _, n := range []int{0, -1, MaxShards + 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("ShardOf(_, %d) did not panic", n)
				}
			}()
			ShardOf("cpe-0001", n)
		}()
	}
}

func TestTopicsFor(t *testing.T) {
	for _, tt := range []struct {
		id     string
		shards int
		want   Topics
	}{
		{"cpe-0001", 64, Topics{Weights: "mcw/v1/cpe/cpe-0001/weights",
			State: "mcw/v1/s/47/cpe/cpe-0001/state", Telemetry: "mcw/v1/s/47/cpe/cpe-0001/telemetry",
			LegacyState: "mcw/v1/cpe/cpe-0001/state", LegacyTelemetry: "mcw/v1/cpe/cpe-0001/telemetry"}},
		{"cpe-0002", 1, Topics{Weights: "mcw/v1/cpe/cpe-0002/weights",
			State: "mcw/v1/s/0/cpe/cpe-0002/state", Telemetry: "mcw/v1/s/0/cpe/cpe-0002/telemetry",
			LegacyState: "mcw/v1/cpe/cpe-0002/state", LegacyTelemetry: "mcw/v1/cpe/cpe-0002/telemetry"}},
		{"cpe-10000", 4096, Topics{Weights: "mcw/v1/cpe/cpe-10000/weights",
			State: "mcw/v1/s/1959/cpe/cpe-10000/state", Telemetry: "mcw/v1/s/1959/cpe/cpe-10000/telemetry",
			LegacyState: "mcw/v1/cpe/cpe-10000/state", LegacyTelemetry: "mcw/v1/cpe/cpe-10000/telemetry"}},
	} {
		if got := TopicsFor(tt.id, tt.shards); got != tt.want {
			t.Errorf("TopicsFor(%q, %d) = %+v", tt.id, tt.shards, got)
		}
	}
}

func TestProxyTopicsFor(t *testing.T) {
	p := ProxyTopicsFor("proxy-0001", DefaultShards)
	for got, want := range map[string]string{
		p.State():                    "mcw/v1/proxy/proxy-0001/state",
		p.CPEState("cpe-0003"):       "mcw/v1/s/21/proxy/proxy-0001/cpe/cpe-0003/state",
		p.CPETelemetry("cpe-0003"):   "mcw/v1/s/21/proxy/proxy-0001/cpe/cpe-0003/telemetry",
		p.LegacyCPEState("cpe-0003"): "mcw/v1/proxy/proxy-0001/cpe/cpe-0003/state",
	} {
		if got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
}

func TestLoadTLSErrors(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	os.WriteFile(junk, []byte("not a certificate"), 0o600)
	for name, args := range map[string][3]string{
		"missing ca":   {filepath.Join(dir, "absent"), junk, junk},
		"ca not a PEM": {junk, junk, junk},
	} {
		if _, err := LoadTLS(args[0], args[1], args[2]); err == nil {
			t.Errorf("%s: LoadTLS succeeded", name)
		}
	}
}

func TestConnectRejectsBadConfig(t *testing.T) {
	for _, c := range []Config{
		{BrokerURL: "mqtts://127.0.0.1:1", ClientID: "cpe/1", WillTopic: "mcw/v1/cpe/cpe/1/state", Will: []byte("{}")},
		{BrokerURL: "://bad", ClientID: "cpe-1", WillTopic: "mcw/v1/cpe/cpe-1/state", Will: []byte("{}")},
		{BrokerURL: "mqtts://127.0.0.1:1", ClientID: "cpe-1"},
	} {
		if _, err := Connect(context.Background(), c); err == nil || !strings.Contains(err.Error(), "mqtt") {
			t.Errorf("Connect(%+v) = %v, want an error", c, err)
		}
	}
}
