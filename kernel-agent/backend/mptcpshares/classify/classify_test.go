package classify

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"golang.org/x/net/bpf"

	"github.com/mcw-xapp/kernel-agent/payload"
)

// pkt describes a packet from its IP header on: what the classifier reads.
type pkt struct {
	v6           bool
	dscp         int
	proto        int
	src, dst     string
	sport, dport uint16
	ipOptions    int  // IPv4: 32-bit words of options (IHL - 5)
	fragment     bool // a non-first fragment (IPv6: in its fragment header)
	short        bool // no transport header
	// IPv6: the extension headers between the fixed header and the
	// upper layer, by next-header value (0, 43, 44, 51 or 60).
	ext []int
}

// ipv6Ext is an extension header of type nh followed by next: hop-by-hop
// 8 octets, routing 24, destination options 16, AH 12, fragment 8 (a
// later fragment: offset 185).
func ipv6Ext(nh, next int, later bool) []byte {
	var b []byte
	switch nh {
	case 0:
		b = make([]byte, 8)
	case 43:
		b = make([]byte, 24)
		b[1] = 2
	case 60:
		b = make([]byte, 16)
		b[1] = 1
	case 51:
		b = make([]byte, 12)
		b[1] = 1 // (12 / 4) - 2
	case 44:
		b = make([]byte, 8)
		if later {
			binary.BigEndian.PutUint16(b[2:], 185<<3)
		}
	}
	b[0] = byte(next)
	return b
}

func (p pkt) bytes() []byte {
	src, dst := netip.MustParseAddr(p.src).AsSlice(), netip.MustParseAddr(p.dst).AsSlice()
	var b []byte
	if !p.v6 {
		b = make([]byte, 20+4*p.ipOptions)
		b[0] = 0x40 | byte(5+p.ipOptions)
		b[1] = byte(p.dscp << 2)
		if p.fragment {
			binary.BigEndian.PutUint16(b[6:], 185) // offset 185 x 8 bytes
		}
		b[8], b[9] = 64, byte(p.proto)
		copy(b[12:], src)
		copy(b[16:], dst)
	} else {
		b = make([]byte, 40)
		binary.BigEndian.PutUint32(b, 6<<28|uint32(p.dscp)<<22|0x12345)
		chain := append(append([]int(nil), p.ext...), p.proto)
		b[6], b[7] = byte(chain[0]), 64
		copy(b[8:], src)
		copy(b[24:], dst)
		for i, nh := range p.ext {
			b = append(b, ipv6Ext(nh, chain[i+1], p.fragment)...)
		}
	}
	if !p.short {
		l4 := make([]byte, 8)
		binary.BigEndian.PutUint16(l4, p.sport)
		binary.BigEndian.PutUint16(l4[2:], p.dport)
		b = append(b, l4...)
	}
	return b
}

func prefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range s {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

const def = 0x10002

// rules are five classes over every key; each returns 1:(0x10+i).
var rules = []Rule{
	{Match: payload.Match{DSCP: []int{46}, Protocols: []int{17}, RemotePorts: []payload.PortRange{{5000, 5010}}}, ClassID: 0x10010},
	{Match: payload.Match{RemotePrefixes: prefixes("10.20.0.0/16", "2001:db8::/32")}, ClassID: 0x10011},
	{Match: payload.Match{DSCP: []int{8, 40}}, ClassID: 0x10012},
	{Match: payload.Match{RemotePorts: []payload.PortRange{{80, 80}, {443, 443}}, RemotePrefixes: prefixes("fd00::/8", "2001:db9:abcd:8000::/49")}, ClassID: 0x10013},
	{Match: payload.Match{Protocols: []int{1, 58}}, ClassID: 0x10014},
}

func run(t *testing.T, side Side, rs []Rule, p []byte) uint32 {
	t.Helper()
	raw, err := program(side, rs, def, 0)
	if err != nil {
		t.Fatal(err)
	}
	ins, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("the program does not disassemble")
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatalf("VM refuses the program: %v", err)
	}
	got, err := vm.Run(p)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(got)
}

func TestClassifyUplink(t *testing.T) {
	v4 := func(dscp, proto int, dst string, dport uint16) pkt {
		return pkt{dscp: dscp, proto: proto, src: "10.34.1.1", dst: dst, sport: 40000, dport: dport}
	}
	v6 := func(dscp, proto int, dst string, dport uint16) pkt {
		return pkt{v6: true, dscp: dscp, proto: proto, src: "fd34::1", dst: dst, sport: 40000, dport: dport}
	}
	withOptions := v4(46, 17, "192.0.2.1", 5003)
	withOptions.ipOptions = 3
	fragment := v4(46, 17, "192.0.2.1", 5003)
	fragment.fragment = true
	icmp := v4(0, 1, "192.0.2.1", 0)
	icmp.short = true
	// IPv6 behind extension headers: class 0's UDP port, class 3's TCP
	// port and prefix.
	v6ext := func(proto int, dst string, dport uint16, ext ...int) pkt {
		p := v6(46, proto, dst, dport)
		p.ext = ext
		return p
	}
	laterV6 := v6ext(17, "fe80::1", 5001, 44)
	laterV6.fragment = true
	tooMany := v6ext(17, "fe80::1", 5001, 0, 60, 60, 60, 60, 60, 60, 60, 60)
	for name, tc := range map[string]struct {
		p    pkt
		want uint32
	}{
		"every key of class 0":            {v4(46, 17, "192.0.2.1", 5000), 0x10010},
		"class 0 before class 1":          {v4(46, 17, "10.20.3.4", 5010), 0x10010},
		"port above the range":            {v4(46, 17, "192.0.2.1", 5011), def},
		"port above the range, prefix":    {v4(46, 17, "10.20.3.4", 5011), 0x10011},
		"TCP is not class 0's protocol":   {v4(46, 6, "192.0.2.1", 5005), def},
		"DSCP 45 is not class 0's":        {v4(45, 17, "192.0.2.1", 5005), def},
		"outside the prefix":              {v4(0, 6, "10.21.0.1", 80), def},
		"low DSCP of class 2":             {v4(8, 6, "192.0.2.1", 1), 0x10012},
		"high DSCP of class 2":            {v4(40, 6, "192.0.2.1", 1), 0x10012},
		"DSCP 63":                         {v4(63, 6, "192.0.2.1", 1), def},
		"ports after IPv4 options":        {withOptions, 0x10010},
		"no ports in a later fragment":    {fragment, def},
		"ICMP":                            {icmp, 0x10014},
		"IPv6 prefix of class 1":          {v6(0, 6, "2001:db8::5", 22), 0x10011},
		"IPv6 port and prefix of class 3": {v6(0, 6, "fd00::1", 443), 0x10013},
		"IPv6 port not class 3's":         {v6(0, 6, "fd00::1", 444), def},
		"IPv6 partial word of the prefix": {v6(0, 6, "2001:db9:abcd:8fff::1", 80), 0x10013},
		"IPv6 just outside the /49":       {v6(0, 6, "2001:db9:abcd:7fff::1", 80), def},
		"IPv6 DSCP 40":                    {v6(40, 17, "fe80::1", 9), 0x10012},
		"IPv6 DSCP 46 UDP 5001":           {v6(46, 17, "fe80::1", 5001), 0x10010},
		"IPv4 address not an IPv6 prefix": {v4(0, 6, "253.0.0.1", 443), def},
		"IPv6 UDP port after hop-by-hop":  {v6ext(17, "fe80::1", 5001, 0), 0x10010},
		"IPv6 after hop-by-hop, routing, destination options and AH": {
			v6ext(17, "fe80::1", 5002, 0, 43, 60, 51), 0x10010},
		"IPv6 first fragment keeps its ports": {v6ext(17, "fe80::1", 5003, 60, 44), 0x10010},
		"IPv6 later fragment has no ports":    {laterV6, def},
		"IPv6 TCP port and prefix after destination options": {
			v6ext(6, "fd00::1", 443, 60), 0x10013},
		"IPv6 the protocol is the upper layer's": {v6ext(58, "fe80::1", 0, 0), 0x10014},
		"IPv6 eight extension headers walked": {
			v6ext(17, "fe80::1", 5001, 0, 60, 60, 60, 60, 60, 60, 60), 0x10010},
		"IPv6 a ninth one is not: no ports": {tooMany, def},
		"the source is not the remote end":  {pkt{proto: 6, src: "10.20.0.1", dst: "192.0.2.1", dport: 80}, def},
	} {
		t.Run(name, func(t *testing.T) {
			if got := run(t, Uplink, rules, tc.p.bytes()); got != tc.want {
				t.Fatalf("class %#x, want %#x", got, tc.want)
			}
		})
	}
	// Not IP (an ARP header starts with the hardware type, 0x0001).
	if got := run(t, Uplink, rules, []byte{0, 1, 8, 0, 6, 4, 0, 1}); got != def {
		t.Fatalf("ARP: class %#x, want the default", got)
	}
}

func TestClassifyDownlink(t *testing.T) {
	for name, tc := range map[string]struct {
		p    pkt
		want uint32
	}{
		"source port and DSCP": {pkt{dscp: 46, proto: 17, src: "192.0.2.1", dst: "10.34.1.1", sport: 5004, dport: 40000}, 0x10010},
		"destination port":     {pkt{dscp: 46, proto: 17, src: "192.0.2.1", dst: "10.34.1.1", sport: 40000, dport: 5004}, def},
		"source prefix":        {pkt{proto: 6, src: "10.20.9.9", dst: "10.34.1.1", sport: 1, dport: 2}, 0x10011},
		"IPv6 source":          {pkt{v6: true, proto: 6, src: "fd00::9", dst: "fd34::1", sport: 80, dport: 40000}, 0x10013},
		"IPv6 destination":     {pkt{v6: true, proto: 6, src: "fe80::9", dst: "fd00::1", sport: 40000, dport: 80}, def},
	} {
		t.Run(name, func(t *testing.T) {
			if got := run(t, Downlink, rules, tc.p.bytes()); got != tc.want {
				t.Fatalf("class %#x, want %#x", got, tc.want)
			}
		})
	}
}

func TestClassifyPrefixZeroAndNoRules(t *testing.T) {
	all := []Rule{{Match: payload.Match{RemotePrefixes: prefixes("0.0.0.0/0")}, ClassID: 0x10010}}
	p := pkt{proto: 6, src: "10.0.0.1", dst: "203.0.113.7", dport: 1}
	if got := run(t, Uplink, all, p.bytes()); got != 0x10010 {
		t.Fatalf("0.0.0.0/0: %#x", got)
	}
	p6 := pkt{v6: true, proto: 6, src: "fd00::1", dst: "fd00::2", dport: 1}
	if got := run(t, Uplink, all, p6.bytes()); got != def {
		t.Fatalf("0.0.0.0/0 took an IPv6 packet: %#x", got)
	}
	if got := run(t, Uplink, nil, p.bytes()); got != def {
		t.Fatalf("no rules: %#x", got)
	}
}

func TestProgramRefuses(t *testing.T) {
	if _, err := Program(Uplink, []Rule{{Match: payload.Match{Cgroup: "/app"}, ClassID: 0x10010}}, def); !errors.Is(err, ErrCgroup) {
		t.Fatalf("cgroup without a mark: %v", err)
	}
	if _, err := Program(Uplink, []Rule{{Match: payload.Match{Cgroup: "/app"}, ClassID: 0x10010, Mark: 1 << 24}}, def); err != nil {
		t.Fatalf("cgroup with a mark: %v", err)
	}
	if _, err := Program(Uplink, []Rule{{Match: payload.Match{DSCP: []int{1}}}}, def); err == nil {
		t.Fatal("class id 0 accepted")
	}
}

// TestProgramLargest: the largest classes the schema allows still make a
// program the kernel takes (every conditional jump within its reach).
func TestProgramLargest(t *testing.T) {
	var m payload.Match
	for d := range 64 {
		m.DSCP = append(m.DSCP, d)
	}
	for p := range 8 {
		m.Protocols = append(m.Protocols, p)
	}
	for r := range 16 {
		m.RemotePorts = append(m.RemotePorts, payload.PortRange{uint16(1000 * (r + 1)), uint16(1000*(r+1) + 10)})
	}
	for i := range 16 {
		m.RemotePrefixes = append(m.RemotePrefixes, netip.MustParsePrefix(fmt.Sprintf("2001:db8::%x/127", 2*i)))
	}
	rs := make([]Rule, payload.MaxClasses)
	for i := range rs {
		rs[i] = Rule{Match: m, ClassID: uint32(0x10010 + i)}
	}
	raw, err := Program(Uplink, rs, def)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("largest program: %d instructions", len(raw))
	if len(raw) > MaxInstructions {
		t.Fatalf("%d instructions", len(raw))
	}
}
