package config

import (
	"fmt"
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

// TestRegistryRefusesOverlapsAndBroadPrefixes: a registry in which one
// CPE's prefixes reach into another's, or name a network rather than a
// CPE, is refused at start, naming the entries (issue 33: with
// cpe-0001: 10.0.0.0/8 beside cpe-0002: 10.20.0.0/16, cpe-0001's state
// steered cpe-0002's address while cpe-0002 was offline).
func TestRegistryRefusesOverlapsAndBroadPrefixes(t *testing.T) {
	const line = "cpe_prefixes: {cpe-0001: [10.31.0.0/16], cpe-0002: [10.32.0.0/16]}"
	// 1.0.0.0/16, 1.1.0.0/16, ...: /16s, each at the floor, covering one /8.
	var sixteens []string
	for i := range 256 {
		sixteens = append(sixteens, fmt.Sprintf("1.%d.0.0/16", i))
	}
	tests := []struct {
		name     string
		registry string
		wantErr  []string
	}{
		{"nested across CPEs", "{cpe-0001: [10.0.0.0/8], cpe-0002: [10.20.0.0/16]}",
			[]string{"cpe_prefixes[cpe-0001][0] \"10.0.0.0/8\": broader than /16", "cpe_prefixes[cpe-0001][0] 10.0.0.0/8 and cpe_prefixes[cpe-0002][0] 10.20.0.0/16 overlap"}},
		{"nested at the floor", "{cpe-0001: [10.20.0.0/16], cpe-0002: [10.20.1.0/24]}",
			[]string{"cpe_prefixes[cpe-0001][0] 10.20.0.0/16 and cpe_prefixes[cpe-0002][0] 10.20.1.0/24 overlap"}},
		{"nested, the narrower listed first", "{cpe-0001: [10.31.0.0/16, 10.20.1.0/24], cpe-0002: [10.20.0.0/16]}",
			[]string{"cpe_prefixes[cpe-0002][0] 10.20.0.0/16 and cpe_prefixes[cpe-0001][1] 10.20.1.0/24 overlap"}},
		{"identical", "{cpe-0001: [10.31.0.0/16], cpe-0002: [10.31.0.0/16]}",
			[]string{"cpe_prefixes[cpe-0001][0] 10.31.0.0/16 and cpe_prefixes[cpe-0002][0] 10.31.0.0/16 are the same prefix"}},
		{"identical IPv6", "{cpe-0001: ['fd31::/64'], cpe-0002: [10.32.0.0/16, 'fd31::/64']}",
			[]string{"cpe_prefixes[cpe-0001][0] fd31::/64 and cpe_prefixes[cpe-0002][1] fd31::/64 are the same prefix"}},
		{"twice in one CPE", "{cpe-0001: [10.31.0.0/16, 10.31.7.0/24], cpe-0002: [10.32.0.0/16]}",
			[]string{"cpe_prefixes[cpe-0001][0] 10.31.0.0/16 and cpe_prefixes[cpe-0001][1] 10.31.7.0/24 overlap: list each address once"}},
		{"half of IPv4", "{cpe-0001: [128.0.0.0/1], cpe-0002: [10.32.0.0/16]}",
			[]string{"cpe_prefixes[cpe-0001][0] \"128.0.0.0/1\": broader than /16"}},
		{"a /8", "{cpe-0001: [11.0.0.0/8], cpe-0002: [10.32.0.0/16]}",
			[]string{"cpe_prefixes[cpe-0001][0] \"11.0.0.0/8\": broader than /16"}},
		{"half of IPv6", "{cpe-0001: ['8000::/1'], cpe-0002: [10.32.0.0/16]}",
			[]string{"cpe_prefixes[cpe-0001][0] \"8000::/1\": broader than /48"}},
		{"a /32 of IPv6", "{cpe-0001: ['2001:db8::/32'], cpe-0002: [10.32.0.0/16]}",
			[]string{"\"2001:db8::/32\": broader than /48"}},
		{"nearly all of IPv4", "{cpe-0001: [1.0.0.0/8, 2.0.0.0/7, 4.0.0.0/6, 8.0.0.0/5, 16.0.0.0/4, 32.0.0.0/3, 64.0.0.0/2, 128.0.0.0/2, 192.0.0.0/3], cpe-0002: [10.32.0.0/16]}",
			[]string{"cpe_prefixes[cpe-0001][0] \"1.0.0.0/8\": broader than /16", "[cpe-0001][6] \"64.0.0.0/2\": broader", "[cpe-0001][8] \"192.0.0.0/3\""}},
		{"many /16s", "{cpe-0001: [" + strings.Join(sixteens, ", ") + "], cpe-0002: [10.32.0.0/16]}",
			[]string{"cpe_prefixes[cpe-0001]: 16777216 IPv4 addresses, more than 4 /16"}},
		{"many /48s", "{cpe-0001: ['2001:db8:1::/48', '2001:db8:2::/48', '2001:db8:3::/48', '2001:db8:4::/48', '2001:db8:5::/48'], cpe-0002: [10.32.0.0/16]}",
			[]string{"cpe_prefixes[cpe-0001]: IPv6 prefixes adding up to more than 4 /48"}},
		{"IPv6 link-local", "{cpe-0001: [10.31.0.0/16, 'fe80::/10'], cpe-0002: [10.32.0.0/16]}",
			[]string{"cpe_prefixes[cpe-0001][1] \"fe80::/10\": broader than /48"}},
		{"IPv6 link-local, narrow", "{cpe-0001: ['fe80::/64'], cpe-0002: [10.32.0.0/16]}",
			[]string{"cpe_prefixes[cpe-0001][0] \"fe80::/64\": overlaps fe80::/10, IPv6 link-local"}},
		{"NAT64", "{cpe-0001: ['64:ff9b::/96'], cpe-0002: [10.32.0.0/16]}",
			[]string{"cpe_prefixes[cpe-0001][0] \"64:ff9b::/96\": overlaps 64:ff9b::/96, the NAT64 well-known prefix"}},
		{"NAT64 local use", "{cpe-0001: ['64:ff9b:1:2::/64'], cpe-0002: [10.32.0.0/16]}",
			[]string{"NAT64 local-use"}},
		{"6to4", "{cpe-0001: ['2002:a1f:100::/48'], cpe-0002: [10.32.0.0/16]}",
			[]string{"6to4"}},
		{"IPv4 link-local", "{cpe-0001: [169.254.7.0/24], cpe-0002: [10.32.0.0/16]}",
			[]string{"IPv4 link-local"}},
		{"loopback", "{cpe-0001: [127.1.0.0/16], cpe-0002: [10.32.0.0/16]}",
			[]string{"loopback"}},
		{"IPv6 multicast", "{cpe-0001: ['ff05:1::/48'], cpe-0002: [10.32.0.0/16]}",
			[]string{"multicast"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(strings.Replace(goodProxy, line, "cpe_prefixes: "+tt.registry, 1)))
			if err == nil {
				t.Fatal("registry accepted")
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not mention %q:\n%v", want, err)
				}
			}
		})
	}
	// What a registry is for still passes: one CPE's pools, at the floors,
	// up to one floor-sized block per WAT, beside another's.
	for _, ok := range []string{
		"{cpe-0001: [10.31.0.0/16], cpe-0002: [10.32.0.0/16]}",
		"{cpe-0001: [10.31.0.0/16, 10.33.0.0/16, 10.34.0.0/16, 10.35.0.0/16], cpe-0002: [10.32.0.0/16]}",
		"{cpe-0001: ['2001:db8:1::/48', '2001:db8:2::/48', '2001:db8:3::/48', '2001:db8:4::/48', 100.64.1.0/24], cpe-0002: ['2001:db8:5::/64', '2001:db8:5:1::/64']}",
		"{cpe-0001: [10.31.0.0/30], cpe-0002: [10.31.0.4/30, '2001:db8::1/128']}",
	} {
		_, err := Parse([]byte(strings.Replace(goodProxy, line, "cpe_prefixes: "+ok, 1)))
		if err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
}
