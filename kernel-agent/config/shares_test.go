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

// TestSharesProxy: the proxy's downlink caps need a rate per safe-weights
// WAT, take rates for other known WATs and a class bound.
func TestSharesProxy(t *testing.T) {
	const proxy = "role: proxy\nproxy_id: proxy-0001\ncpes: [cpe-0001]\nmqtt: {broker_url: mqtts://127.0.0.1:8883, ca_file: a, cert_file: b, key_file: c}\n" +
		"backend: mptcp-shares\nmptcp_shares: {link_mbps: {nr: 20, wifi: 20, lte: 5}, max_classes: 64}\nsafe_weights: {nr: 1, wifi: 1}\nstate_dir: /tmp/x\ncpe_prefixes: {cpe-0001: [10.31.0.0/16]}\n"
	c, err := Parse([]byte(proxy))
	if err != nil {
		t.Fatal(err)
	}
	if c.MPTCPShares.MaxClasses != 64 || c.MPTCPShares.LinkMbps["lte"] != 5 {
		t.Fatalf("mptcp_shares %+v", c.MPTCPShares)
	}
	for _, tt := range []struct{ name, old, new, wantErr string }{
		{"safe WAT without rate", "nr: 20, wifi: 20, lte: 5", "nr: 20, lte: 5", "link_mbps.wifi: required"},
		{"unknown WAT", "lte: 5", "5g: 5", "link_mbps.5g: not a known WAT"},
		{"rate too high", "lte: 5", "lte: 30001", "link_mbps.lte 30001"},
		{"bound negative", "max_classes: 64", "max_classes: -1", "max_classes -1"},
		{"bound too high", "max_classes: 64", "max_classes: 65535", "max_classes 65535"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(strings.Replace(proxy, tt.old, tt.new, 1)))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Parse = %v, want an error mentioning %q", err, tt.wantErr)
			}
		})
	}
	cpe := strings.Replace(good, "backend: wrr-sysctl\n", "backend: mptcp-shares\nmptcp_shares:\n  link_mbps: {nr: 100, wifi: 40}\n  max_classes: 3\n", 1)
	if _, err := Parse([]byte(cpe)); err == nil || !strings.Contains(err.Error(), "max_classes: only with role proxy") {
		t.Fatalf("Parse = %v, want max_classes refused for a CPE", err)
	}
}

// TestSharesEnforce: htb by default, pacing with its cgroup, clear errors
// for an unknown enforcer, a missing or relative cgroup, a cgroup without
// pacing and a proxy bound past the pacer's map.
func TestSharesEnforce(t *testing.T) {
	parse := func(extra string) (Config, error) {
		return Parse([]byte(strings.Replace(good, "backend: wrr-sysctl\n", sharesKeys+extra, 1)))
	}
	c, err := parse("")
	if err != nil || c.MPTCPShares.Enforcement() != EnforceHTB {
		t.Fatalf("default: %v, enforcement %q; want htb", err, c.MPTCPShares.Enforcement())
	}
	c, err = parse("  enforce: pacing\n  pacing_cgroup: /sys/fs/cgroup/mcw.slice\n")
	if err != nil || c.MPTCPShares.Enforcement() != EnforcePacing || c.MPTCPShares.PacingCgroup != "/sys/fs/cgroup/mcw.slice" {
		t.Fatalf("pacing: %v, %+v", err, c.MPTCPShares)
	}
	for _, tt := range []struct{ name, extra, wantErr string }{
		{"unknown", "  enforce: tbf\n", `mptcp_shares.enforce "tbf": want htb or pacing`},
		{"pacing without cgroup", "  enforce: pacing\n", "mptcp_shares.pacing_cgroup: required with mptcp_shares.enforce pacing"},
		{"relative cgroup", "  enforce: pacing\n  pacing_cgroup: mcw.slice\n", `pacing_cgroup "mcw.slice": want a clean absolute path`},
		{"unclean cgroup", "  enforce: pacing\n  pacing_cgroup: /sys/fs/cgroup/../x\n", "want a clean absolute path"},
		{"cgroup with htb", "  enforce: htb\n  pacing_cgroup: /sys/fs/cgroup\n", "pacing_cgroup: only with mptcp_shares.enforce pacing"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parse(tt.extra); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Parse = %v, want an error mentioning %q", err, tt.wantErr)
			}
		})
	}
	const proxy = "role: proxy\nproxy_id: proxy-0001\ncpes: [cpe-0001]\nmqtt: {broker_url: mqtts://127.0.0.1:8883, ca_file: a, cert_file: b, key_file: c}\n" +
		"backend: mptcp-shares\nmptcp_shares: {link_mbps: {nr: 20, wifi: 20}, max_classes: 5000, enforce: pacing, pacing_cgroup: /sys/fs/cgroup}\nsafe_weights: {nr: 1, wifi: 1}\nstate_dir: /tmp/x\ncpe_prefixes: {cpe-0001: [10.31.0.0/16]}\n"
	if _, err := Parse([]byte(proxy)); err == nil || !strings.Contains(err.Error(), "max_classes 5000: want at most 4096 with enforce pacing") {
		t.Fatalf("Parse = %v, want the pacing bound", err)
	}
	if _, err := Parse([]byte(strings.Replace(proxy, "5000", "4096", 1))); err != nil {
		t.Fatalf("proxy with pacing: %v", err)
	}
}
