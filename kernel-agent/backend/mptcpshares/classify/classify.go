// Package classify writes the packet classifier of traffic classes: one
// classic BPF program (cBPF, what cls_bpf takes with CAP_NET_ADMIN alone,
// as tcpdump's filters) that returns the HTB class id of the first class
// whose match a packet meets, or a default class id.
//
// Why a program and not tc filters: a class matches when every key given
// matches and a list key when any of its items does, and a packet takes
// the first class it matches. Per-item filters (u32, flower) would need
// the cross product of a class's lists to express the AND, or goto-chain
// actions, flower and matchall, which kernels built without them lack
// (the 6.18 test kernel has u32 and cls_bpf only). One program evaluates
// the classes in order, each list as a run of comparisons, and the whole
// set is replaced atomically when the classes change.
//
// The program reads the IP header relative to the network header
// (SKF_NET_OFF), so it works on Ethernet and raw-IP (wwan) interfaces
// alike. Ports are TCP's, UDP's and SCTP's, and not in non-first
// fragments. IPv6 extension headers (hop-by-hop, routing, fragment,
// destination options, AH) are walked, up to MaxIPv6Extensions of them,
// to the upper-layer protocol, which is what a protocol list and the
// ports are read from; a packet with more is matched by the last header
// reached, without ports. A packet without ports meets no port list.
// Non-IP packets
// take the default. A cgroup cannot be seen by a classic program: a
// class that matches one names a bit of skb->mark that a program on the
// cgroup sets (package cgroupmark), and the classifier tests the bit.
package classify

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/net/bpf"

	"github.com/mcw-xapp/kernel-agent/payload"
)

// Side says which end of a packet is its flow's remote end.
type Side int

const (
	// Uplink: the remote end is the destination (a CPE's egress).
	Uplink Side = iota
	// Downlink: the remote end is the source (a proxy's egress to a CPE).
	Downlink
)

// Rule is one class as the program checks it: its match and the class
// id (TC handle) the program returns for its packets; Mark is the bit of
// skb->mark that stands for its cgroup (needed when it matches one).
type Rule struct {
	Match   payload.Match
	ClassID uint32
	Mark    uint32
}

// MaxInstructions is the kernel's bound on a classic program
// (BPF_MAXINSNS).
const MaxInstructions = 4096

// netOff is SKF_NET_OFF: a load at netOff+k reads byte k of the network
// header.
const netOff = 0xfff00000 // -0x100000

// ErrCgroup: a rule matches a cgroup without the mark that stands for it.
var ErrCgroup = errors.New("matching a cgroup needs its packets marked by a program on the cgroup, and this rule has no mark")

// Program returns the classifier of rules for side: the class id of the
// first rule a packet matches, else defaultID. It fails for a rule that
// matches a cgroup without a mark and when the program would pass
// MaxInstructions.
func Program(side Side, rules []Rule, defaultID uint32) ([]bpf.RawInstruction, error) {
	return program(side, rules, defaultID, netOff)
}

// program is Program with the packet's network header at offset base of
// what loads address (netOff in the kernel; 0 for tests in a VM that
// starts packets at the IP header).
func program(side Side, rules []Rule, defaultID uint32, base uint32) ([]bpf.RawInstruction, error) {
	for i, r := range rules {
		if r.Match.Cgroup != "" && r.Mark == 0 {
			return nil, fmt.Errorf("class %d: %w", i, ErrCgroup)
		}
		if r.ClassID == 0 || r.ClassID == ^uint32(0) {
			return nil, fmt.Errorf("class %d: class id %#x is cls_bpf's no-match or default", i, r.ClassID)
		}
	}
	a := &asm{base: base}
	a.ldb(0)
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 4})
	a.jeq(4, "", "not4")
	a.ja("v4")
	a.label("not4")
	a.jeq(6, "", "notip")
	a.ja("v6")
	a.label("notip")
	a.ret(defaultID)
	for _, fam := range []int{4, 6} {
		a.label(fmt.Sprintf("v%d", fam))
		a.header(side, fam)
		for i, r := range rules {
			a.class(fam, fmt.Sprintf("v%d.%d", fam, i), r)
		}
		a.ret(defaultID)
	}
	return a.assemble()
}

// Scratch memory slots of the program.
const (
	mAddr   = 0 // 0..3: the remote address (IPv4 in slot 0)
	mPort   = 4 // the remote port, or noPort
	mProto  = 5 // the IP protocol (IPv6: the upper layer's, after extension headers)
	mDSCPLo = 6 // 1 << dscp for dscp < 32, else 0
	mDSCPHi = 7 // 1 << (dscp - 32) for dscp >= 32, else 0
	mNext   = 8 // IPv6: the next header while the extension headers are walked
	mOff    = 9 // IPv6: the next header's offset, meanwhile
)

// MaxIPv6Extensions is how many IPv6 extension headers the classifier
// walks (a classic program has no loops: each is unrolled). RFC 8200
// orders at most six kinds before the upper layer, each once but
// destination options (twice); eight covers that.
const MaxIPv6Extensions = 8

// IPv6 next-header values of the extension headers walked.
const (
	nhHopByHop = 0
	nhRouting  = 43
	nhFragment = 44
	nhAH       = 51
	nhDestOpts = 60
)

// noPort is above every port: no range holds it.
const noPort = 0x10000

// header loads what the classes compare into scratch memory.
func (a *asm) header(side Side, fam int) {
	p := fmt.Sprintf("h%d.", fam)
	if fam == 4 {
		a.ldb(1) // TOS
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 2})
	} else {
		a.ldh(0) // version, traffic class, flow label
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 6})
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0x3f})
	}
	// The DSCP as a bit in one of two 32-bit masks (ALU shifts are
	// 32-bit).
	a.op(bpf.TAX{})
	a.jge(32, p+"hi", "")
	a.op(bpf.LoadConstant{Dst: bpf.RegA, Val: 1})
	a.op(bpf.ALUOpX{Op: bpf.ALUOpShiftLeft})
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: mDSCPLo})
	a.op(bpf.LoadConstant{Dst: bpf.RegA, Val: 0})
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: mDSCPHi})
	a.ja(p + "dscp")
	a.label(p + "hi")
	a.op(bpf.TXA{})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpSub, Val: 32})
	a.op(bpf.TAX{})
	a.op(bpf.LoadConstant{Dst: bpf.RegA, Val: 1})
	a.op(bpf.ALUOpX{Op: bpf.ALUOpShiftLeft})
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: mDSCPHi})
	a.op(bpf.LoadConstant{Dst: bpf.RegA, Val: 0})
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: mDSCPLo})
	a.label(p + "dscp")

	addrAt, words := uint32(16), 1
	if fam == 6 {
		addrAt, words = 24, 4
	}
	if side == Downlink {
		addrAt -= 4 * uint32(words)
	}
	for w := range words {
		a.ldw(addrAt + 4*uint32(w))
		a.op(bpf.StoreScratch{Src: bpf.RegA, N: mAddr + w})
	}
	a.op(bpf.LoadConstant{Dst: bpf.RegA, Val: noPort})
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: mPort})
	if fam == 4 {
		a.ldb(9)
	} else {
		a.ldb(6)
		a.ipv6Walk(p, p+"noports")
	}
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: mProto})
	for _, proto := range []uint32{6, 17, 132} { // TCP, UDP, SCTP
		a.jeq(proto, p+"ports", "")
	}
	a.ja(p + "end")
	a.label(p + "ports")
	portAt := uint32(2) // destination port
	if side == Downlink {
		portAt = 0 // source port
	}
	if fam == 4 {
		// Fragment offset: only the first fragment has the ports.
		a.ldh(6)
		a.jset(0x1fff, p+"end", "")
		// X = the header's length (IHL x 4).
		a.op(bpf.LoadMemShift{Off: a.base})
		a.op(bpf.LoadIndirect{Off: a.base + portAt, Size: 2})
	} else {
		// X = the upper layer's offset (ipv6Walk).
		a.op(bpf.LoadIndirect{Off: a.base + portAt, Size: 2})
	}
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: mPort})
	if fam == 6 {
		a.ja(p + "end")
		a.label(p + "noports")
		a.op(bpf.StoreScratch{Src: bpf.RegA, N: mProto})
	}
	a.label(p + "end")
}

// ipv6Walk follows the next-header chain from the fixed header (A holds
// its next header) over up to MaxIPv6Extensions extension headers, and
// leaves the upper layer's protocol in A and its offset in X; it jumps to
// noPorts with the protocol in A when a non-first fragment has none.
func (a *asm) ipv6Walk(p, noPorts string) {
	a.op(bpf.LoadConstant{Dst: bpf.RegX, Val: 40})
	for i := range MaxIPv6Extensions {
		e := fmt.Sprintf("%sext%d.", p, i)
		next := fmt.Sprintf("%sext%d.", p, i+1)
		for _, nh := range []uint32{nhHopByHop, nhRouting, nhDestOpts} {
			a.jeq(nh, e+"opts", "")
		}
		a.jeq(nhAH, e+"ah", "")
		a.jeq(nhFragment, e+"frag", "")
		a.ja(p + "upper")
		// Options-like headers: 8-octet units beyond the first 8.
		a.label(e + "opts")
		a.op(bpf.LoadIndirect{Off: a.base + 1, Size: 1})
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAdd, Val: 1})
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpShiftLeft, Val: 3})
		a.ja(e + "skip")
		// AH: 4-octet units, less 2.
		a.label(e + "ah")
		a.op(bpf.LoadIndirect{Off: a.base + 1, Size: 1})
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAdd, Val: 2})
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpShiftLeft, Val: 2})
		a.ja(e + "skip")
		// Fragment: 8 octets; only the first fragment has the ports.
		a.label(e + "frag")
		a.op(bpf.LoadIndirect{Off: a.base + 2, Size: 2})
		a.jset(0xfff8, e+"later", "")
		a.op(bpf.LoadConstant{Dst: bpf.RegA, Val: 8})
		a.ja(e + "skip")
		a.label(e + "later")
		a.op(bpf.LoadIndirect{Off: a.base, Size: 1})
		a.ja(noPorts)
		// A = the header's length: A its next header, X past it.
		a.label(e + "skip")
		a.op(bpf.ALUOpX{Op: bpf.ALUOpAdd})
		a.op(bpf.StoreScratch{Src: bpf.RegA, N: mOff})
		a.op(bpf.LoadIndirect{Off: a.base, Size: 1})
		a.op(bpf.StoreScratch{Src: bpf.RegA, N: mNext})
		a.op(bpf.LoadScratch{Dst: bpf.RegX, N: mOff})
		a.op(bpf.LoadScratch{Dst: bpf.RegA, N: mNext})
		a.label(next)
	}
	a.label(p + "upper")
}

// class emits rule r for family fam: each key given is a block that jumps
// to the next class (fail) unless one of its items matches; after the
// last block the class id is returned. A rule whose prefixes are all of
// the other family never matches here and is left out.
func (a *asm) class(fam int, name string, r Rule) {
	m := r.Match
	var prefixes []netip.Prefix
	for _, p := range m.RemotePrefixes {
		if (fam == 4) == p.Addr().Is4() {
			prefixes = append(prefixes, p)
		}
	}
	if m.RemotePrefixes != nil && prefixes == nil {
		return
	}
	fail := name + ".fail"
	if m.DSCP != nil {
		ok := name + ".dscp"
		var lo, hi uint32
		for _, d := range m.DSCP {
			if d < 32 {
				lo |= 1 << d
			} else {
				hi |= 1 << (d - 32)
			}
		}
		if lo != 0 {
			a.op(bpf.LoadScratch{Dst: bpf.RegA, N: mDSCPLo})
			a.jset(lo, ok, "")
		}
		if hi != 0 {
			a.op(bpf.LoadScratch{Dst: bpf.RegA, N: mDSCPHi})
			a.jset(hi, ok, "")
		}
		a.ja(fail)
		a.label(ok)
	}
	if m.Protocols != nil {
		ok := name + ".proto"
		a.op(bpf.LoadScratch{Dst: bpf.RegA, N: mProto})
		for _, p := range m.Protocols {
			a.jeq(uint32(p), ok, "")
		}
		a.ja(fail)
		a.label(ok)
	}
	if m.RemotePorts != nil {
		ok := name + ".ports"
		a.op(bpf.LoadScratch{Dst: bpf.RegA, N: mPort})
		for j, pr := range m.RemotePorts {
			next := fmt.Sprintf("%s.ports%d", name, j)
			a.jge(uint32(pr[0]), "", next)
			a.jgt(uint32(pr[1]), "", ok)
			a.label(next)
		}
		a.ja(fail)
		a.label(ok)
	}
	if prefixes != nil {
		ok := name + ".prefix"
		for j, p := range prefixes {
			next := fmt.Sprintf("%s.prefix%d", name, j)
			a.prefix(p, ok, next)
			a.label(next)
		}
		a.ja(fail)
		a.label(ok)
	}
	if m.Cgroup != "" {
		a.op(bpf.LoadExtension{Num: bpf.ExtMark})
		a.jset(r.Mark, "", fail)
	}
	a.ret(r.ClassID)
	a.label(fail)
}

// prefix jumps to ok when the remote address in scratch memory is in p,
// else to next.
func (a *asm) prefix(p netip.Prefix, ok, next string) {
	bits := p.Bits()
	if bits == 0 {
		a.ja(ok)
		return
	}
	addr := p.Addr().AsSlice()
	words := (bits + 31) / 32
	for w := range words {
		val := binary.BigEndian.Uint32(addr[4*w:])
		a.op(bpf.LoadScratch{Dst: bpf.RegA, N: mAddr + w})
		if left := bits - 32*w; left < 32 {
			mask := ^uint32(0) << (32 - left)
			a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: mask})
			val &= mask
		}
		if w == words-1 {
			a.jeq(val, ok, next)
		} else {
			a.jeq(val, "", next)
		}
	}
}
