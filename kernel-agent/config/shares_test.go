package config

import (
	"strings"
	"testing"
)

const sharesKeys = "backend: mptcp-shares\nmptcp_shares:\n  link_mbps: {nr: 100, wifi: 40}\n"

func TestParseShares(t *testing.T) {
	c, err := Parse([]byte(strings.Replace(good, "backend: wrr-sysctl\n", sharesKeys, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if c.MPTCPShares.LinkMbps["nr"] != 100 || c.MPTCPShares.LinkMbps["wifi"] != 40 {
		t.Fatalf("link rates %v", c.MPTCPShares.LinkMbps)
	}
	for _, tt := range []struct{ name, old, new, wantErr string }{
		{"missing rate", "{nr: 100, wifi: 40}", "{nr: 100}", "link_mbps.wifi: required"},
		{"rate for absent wat", "{nr: 100, wifi: 40}", "{nr: 100, wifi: 40, lifi: 5}", "link_mbps.lifi: not a configured WAT"},
		{"zero rate", "{nr: 100, wifi: 40}", "{nr: 0, wifi: 40}", "link_mbps.nr 0"},
		{"rate too high", "{nr: 100, wifi: 40}", "{nr: 100000, wifi: 40}", "link_mbps.nr 100000"},
		{"not a number", "{nr: 100, wifi: 40}", "{nr: fast, wifi: 40}", "fast"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			keys := strings.Replace(sharesKeys, tt.old, tt.new, 1)
			_, err := Parse([]byte(strings.Replace(good, "backend: wrr-sysctl\n", keys, 1)))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Parse = %v, want an error mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestSharesProxyRefused(t *testing.T) {
	proxy := "role: proxy\nproxy_id: proxy-0001\ncpes: [cpe-0001]\nmqtt: {broker_url: mqtts://127.0.0.1:8883, ca_file: a, cert_file: b, key_file: c}\n" +
		"backend: mptcp-shares\nsafe_weights: {nr: 1}\nstate_dir: /tmp/x\n"
	if _, err := Parse([]byte(proxy)); err == nil || !strings.Contains(err.Error(), "role cpe only") {
		t.Fatalf("Parse = %v, want mptcp-shares refused for a proxy", err)
	}
}
