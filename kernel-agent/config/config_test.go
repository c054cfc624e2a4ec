package config

import (
	"os"
	"strings"
	"testing"
)

const good = `
cpe_id: cpe-0001
mqtt:
  broker_url: mqtts://127.0.0.1:8883
  ca_file: ca.crt
  cert_file: cpe.crt
  key_file: cpe.key
wats:
  nr: {interface: nr0}
  wifi: {interface: wlan0}
backend: wrr-sysctl
safe_weights: {nr: 1, wifi: 1}
state_dir: /tmp/x
`

func TestParseGood(t *testing.T) {
	c, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if c.MetricsListen != "127.0.0.1:9472" || c.Telemetry.IntervalMs != 1000 || !c.Telemetry.OnlyMPTCP() || c.MQTT.KeepAliveS != 30 {
		t.Fatalf("defaults not filled: %+v", c)
	}
}

func TestExampleFileValid(t *testing.T) {
	if _, err := os.Stat("../deploy/agent.example.yaml"); err != nil {
		t.Fatalf("example config missing: %v", err)
	}
	if _, err := Load("../deploy/agent.example.yaml"); err != nil {
		t.Fatalf("deploy/agent.example.yaml: %v", err)
	}
}

func TestProxyExampleFileValid(t *testing.T) {
	c, err := Load("../deploy/proxy.example.yaml")
	if err != nil {
		t.Fatalf("deploy/proxy.example.yaml: %v", err)
	}
	if !c.IsProxy() || c.ClientID() != "proxy-0001" || len(c.CPEs) != 2 {
		t.Fatalf("proxy example: %+v", c)
	}
}

const goodProxy = `
role: proxy
proxy_id: proxy-0001
cpes: [cpe-0001, cpe-0002]
mqtt:
  broker_url: mqtts://127.0.0.1:8883
  ca_file: ca.crt
  cert_file: proxy.crt
  key_file: proxy.key
backend: dry-run
safe_weights: {nr: 1, wifi: 1}
state_dir: /tmp/x
cpe_prefixes: {cpe-0001: [10.31.0.0/16], cpe-0002: [10.32.0.0/16]}
`

func TestParseProxy(t *testing.T) {
	c, err := Parse([]byte(goodProxy))
	if err != nil || !c.IsProxy() || c.ClientID() != "proxy-0001" {
		t.Fatalf("Parse = %+v, %v", c, err)
	}
	if c, err := Parse([]byte(good)); err != nil || c.IsProxy() || c.ClientID() != "cpe-0001" {
		t.Fatalf("default role: %+v, %v", c, err)
	}
	many := "cpes: [" + strings.Repeat("c,", MaxCPEs) + "c]"
	tests := []struct{ name, old, new, wantErr string }{
		{"unknown role", "role: proxy", "role: relay", "role"},
		{"bad proxy id", "proxy_id: proxy-0001", "proxy_id: proxy/1", "proxy_id"},
		{"no cpes", "cpes: [cpe-0001, cpe-0002]", "cpes: []", "cpes: 0 CPEs"},
		{"too many cpes", "cpes: [cpe-0001, cpe-0002]", many, "want 1..1024"},
		{"repeated cpe", "cpe-0002]", "cpe-0001]", "listed twice"},
		{"bad cpe id", "cpe-0002]", "cpe#2]", "cpes[1]"},
		{"own id as cpe", "cpe-0002]", "proxy-0001]", "own id"},
		{"cpe keys in a proxy", "state_dir: /tmp/x", "state_dir: /tmp/x\ncpe_id: cpe-0001", "only with role cpe"},
		{"wats in a proxy", "state_dir: /tmp/x", "state_dir: /tmp/x\nwats: {nr: {interface: nr0}}", "only with role cpe"},
		{"unknown WAT in safe weights", "{nr: 1, wifi: 1}", "{nr: 1, wifi7: 1}", "unknown WAT"},
		{"registry of an unserved CPE", "cpe-0002: [10.32.0.0/16]}", "cpe-0002: [10.32.0.0/16], cpe-0009: [10.33.0.0/16]}", "not one of cpes"},
		{"registry empty", "cpe-0001: [10.31.0.0/16]", "cpe-0001: []", "empty"},
		{"registry not a prefix", "cpe-0001: [10.31.0.0/16]", "cpe-0001: [10.31.0.1]", "cpe_prefixes[cpe-0001][0]"},
		{"registry host bits", "cpe-0001: [10.31.0.0/16]", "cpe-0001: [10.31.0.1/16]", "host bits"},
		{"registry wildcard", "cpe-0001: [10.31.0.0/16]", "cpe-0001: [0.0.0.0/0]", "unspecified"},
		{"registry mapped", "cpe-0001: [10.31.0.0/16]", "cpe-0001: ['::ffff:10.0.0.0/104']", "IPv4-mapped"},
		// A CPE's claim alone never decides which traffic is its own.
		{"no registry", "cpe_prefixes: {cpe-0001: [10.31.0.0/16], cpe-0002: [10.32.0.0/16]}", "", "cpe_prefixes[cpe-0001]: missing"},
		{"a CPE left out of the registry", ", cpe-0002: [10.32.0.0/16]}", "}", "cpe_prefixes[cpe-0002]: missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(goodProxy, tt.old) {
				t.Fatalf("%q not in the good config", tt.old)
			}
			_, err := Parse([]byte(strings.Replace(goodProxy, tt.old, tt.new, 1)))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Parse = %v, want an error mentioning %q", err, tt.wantErr)
			}
		})
	}
	c, err = Parse([]byte(strings.Replace(goodProxy, "cpe-0001: [10.31.0.0/16]", "cpe-0001: [10.31.0.0/16, 'fd31::/64']", 1)))
	if err != nil || len(c.Prefixes()["cpe-0001"]) != 2 || c.Prefixes()["cpe-0001"][1].String() != "fd31::/64" {
		t.Fatalf("registry: %+v, %v", c.Prefixes(), err)
	}
	if _, err := Parse([]byte(good + "cpes: [cpe-0002]\n")); err == nil || !strings.Contains(err.Error(), "only with role proxy") {
		t.Fatalf("cpes in a CPE config: %v", err)
	}
}

func TestParseBad(t *testing.T) {
	tests := []struct{ name, old, new, wantErr string }{
		{"bad cpe id", "cpe-0001", "cpe/0001", "cpe_id"},
		{"plain mqtt", "mqtts://", "mqtt://", "mutual TLS"},
		{"unknown wat", "wifi: {interface: wlan0}", "wifi7: {interface: wlan0}", "unknown WAT"},
		{"shared interface", "wlan0", "nr0", "share interface"},
		{"unknown backend", "wrr-sysctl", "bpf", "backend"},
		{"all-zero safe weights", "{nr: 1, wifi: 1}", "{nr: 0, wifi: 0}", "all zero"},
		{"safe weight out of range", "{nr: 1, wifi: 1}", "{nr: 300}", "outside"},
		{"safe weight for absent wat", "{nr: 1, wifi: 1}", "{nr: 1, lifi: 1}", "not in wats"},
		{"unknown key", "state_dir: /tmp/x", "state_dir: /tmp/x\nstatedir: y", "statedir"},
		{"metrics not loopback", "state_dir: /tmp/x", "state_dir: /tmp/x\nmetrics_listen: 0.0.0.0:9472", "loopback"},
		{"missing key file", "  key_file: cpe.key\n", "", "key_file"},
		{"zero shards", "  key_file: cpe.key\n", "  key_file: cpe.key\n  shards: 0\n", "mqtt.shards 0"},
		{"too many shards", "  key_file: cpe.key\n", "  key_file: cpe.key\n  shards: 4097\n", "mqtt.shards 4097"},
		{"negative shards", "  key_file: cpe.key\n", "  key_file: cpe.key\n  shards: -1\n", "mqtt.shards -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(good, tt.old) {
				t.Fatalf("%q not in the good config", tt.old)
			}
			_, err := Parse([]byte(strings.Replace(good, tt.old, tt.new, 1)))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Parse = %v, want an error mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestShards(t *testing.T) {
	for _, tt := range []struct {
		extra string
		want  int
	}{
		{"", 64},
		{"  shards: 1\n", 1},
		{"  shards: 4096\n", 4096},
	} {
		c, err := Parse([]byte(strings.Replace(good, "  key_file: cpe.key\n", "  key_file: cpe.key\n"+tt.extra, 1)))
		if err != nil || c.MQTT.Shards != tt.want {
			t.Errorf("with %q: shards %d, %v; want %d", tt.extra, c.MQTT.Shards, err, tt.want)
		}
	}
}

func TestLeaseSkew(t *testing.T) {
	c, err := Parse([]byte(good))
	if err != nil || c.Lease.MaxClockSkew() != DefaultMaxClockSkew {
		t.Fatalf("default skew: %v %v", c.Lease.MaxClockSkew(), err)
	}
	c, err = Parse([]byte(good + "lease: {max_clock_skew_ms: 0}\n"))
	if err != nil || c.Lease.MaxClockSkew() != 0 {
		t.Fatalf("zero skew: %v %v", c.Lease.MaxClockSkew(), err)
	}
	for _, bad := range []string{"-1", "60001"} {
		if _, err := Parse([]byte(good + "lease: {max_clock_skew_ms: " + bad + "}\n")); err == nil || !strings.Contains(err.Error(), "max_clock_skew_ms") {
			t.Fatalf("skew %s: %v", bad, err)
		}
	}
}
