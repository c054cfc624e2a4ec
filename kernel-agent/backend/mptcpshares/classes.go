package mptcpshares

import (
	"errors"
	"fmt"
	"math"
	"slices"

	vnl "github.com/vishvananda/netlink"
	"golang.org/x/net/bpf"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/backend/mptcpshares/classify"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// Traffic classes (issue 35). A WAT that carries classes gets, in place
// of one capped class, a parent class at the WAT's cap (unlimitedBps when
// the WAT is uncapped) and under it one leaf for the traffic no class
// takes (the default rule) and one per class, each with its bfifo; a
// classifier (package classify) sends each packet to its leaf. A leaf's
// ceiling is:
//
//   - on a WAT its rule uses (weight > 0): the rule's cap there, at most
//     the parent's (no cap: it borrows up to the parent's);
//   - on a WAT its rule does not use: minCapBps, the floor (the backup
//     flag is per endpoint, so it cannot hold one class off a WAT). The
//     agent hands a class whose WATs are all down the default rule's
//     weights, so it is not held at the floor on the WATs left.
//
// The default rule's leaf is at the floor on a WAT at weight 0 only when
// a class uses the WAT; otherwise the WAT's backup flag steers, as
// without classes, and its leaf keeps the parent's ceiling so that the
// WAT carries everything when it is the last path. The backup flag is set
// only on a WAT no rule uses.
//
// Urgent classes' leaves have HTB priority 0, the others 1: HTB serves
// the lower priority first when leaves borrow from their parent, so an
// urgent class's packets leave before bulk queued beside them. Borrowing
// waits for the parent's tokens, though, and one bulk GSO packet of 64
// KB holds an 8 Mbit/s parent for 64 ms: so an urgent leaf is also
// guaranteed a tenth of its ceiling (urgentShare), which it sends at once
// without borrowing. Measured (integration.TestNetnsClasses, WATs capped
// at 8 Mbit/s beside bulk): a 200-byte request/response's RTT p50 3.7-7.7
// ms when the urgent leaf only borrowed, 0.2 ms with the guarantee. The
// other leaves are guaranteed minCapBps. A WAT's leaves can thus pass its
// cap together by their guarantees while they use them: an urgent class
// by at most a tenth of its ceiling.

// unlimitedBps is the parent class's rate on a WAT without a cap: HTB
// needs one, and MaxLinkMbps is above every link rate the agent accepts.
const unlimitedBps = MaxLinkMbps * 1_000_000

// HTB minors of a WAT that carries classes: the parent, the default
// rule's leaf (the root's default class) and the first class's leaf.
const (
	parentMinor     = 1
	defaultMinor    = 2
	firstClassMinor = 0x10
)

// classifierPrio is the classifier's preference: before the downlink's
// u32 filters (preferences from 2).
const classifierPrio = 1

// leafQuantum is how many bytes a borrowing leaf sends per round among
// leaves of its priority: a few full-size packets, so that a leaf with
// little to send waits little behind one that is backlogged.
const leafQuantum = 16 * 1024

// leaf is one HTB leaf: the default rule's or a class's on one WAT.
type leaf struct {
	minor  uint16
	ceil   uint64 // bit/s
	urgent bool
}

// urgentShare is the part of its ceiling an urgent leaf is guaranteed.
const urgentShare = 10

// rate is the leaf's guaranteed rate: the floor, or for an urgent leaf a
// tenth of its ceiling (never above the ceiling: a leaf at the floor stays
// there).
func (l leaf) rate() uint64 {
	if l.urgent {
		return min(max(l.ceil/urgentShare, minCapBps), l.ceil)
	}
	return min(minCapBps, l.ceil)
}

func (l leaf) prio() uint32 {
	if l.urgent {
		return 0
	}
	return 1
}

// watPlan is what a WAT that carries classes holds: its parent's rate
// and its leaves, the default rule's first.
type watPlan struct {
	parent uint64
	leaves []leaf
}

// planWAT returns p's plan when its cap is capBps (0: uncapped) and the
// device has classes, whose leaves have minors minors[i].
func planWAT(p backend.Path, capBps uint64, classes []backend.Class, defMinor uint16, minors []uint16) watPlan {
	parent := capBps
	if parent == 0 {
		parent = unlimitedBps
	}
	ceil := func(use bool, capMbps float64) uint64 {
		if !use {
			return minCapBps
		}
		if capMbps > 0 {
			return min(parent, max(uint64(capMbps*1e6), minCapBps))
		}
		return parent
	}
	plan := watPlan{parent: parent, leaves: []leaf{{minor: defMinor, ceil: ceil(p.Weight > 0 || !backend.ClassUses(classes, p.WAT), 0)}}}
	for i, c := range classes {
		plan.leaves = append(plan.leaves, leaf{minor: minors[i], ceil: ceil(c.Weights[p.WAT] > 0, c.CapsMbps[p.WAT]), urgent: c.Urgent})
	}
	return plan
}

// onOffPaths are the paths handed to the backup flags: a WAT some class
// uses is not backup, whatever the default rule's weight there.
func onOffPaths(paths []backend.Path, classes []backend.Class) []backend.Path {
	out := slices.Clone(paths)
	for i, p := range out {
		if p.Weight == 0 && backend.ClassUses(classes, p.WAT) {
			out[i].Weight = 1
		}
	}
	return out
}

// classMinors are the leaf minors of n classes on a CPE's WATs.
func classMinors(n int) []uint16 {
	m := make([]uint16, n)
	for i := range m {
		m[i] = firstClassMinor + uint16(i)
	}
	return m
}

// reportClasses turns the plans of a device's WATs into what is reported
// per class: its ceiling per WAT (unlimited ones left out) and urgency.
func reportClasses(classes []backend.Class, plans map[string]watPlan) map[string]payload.AppliedClass {
	if len(classes) == 0 {
		return nil
	}
	out := make(map[string]payload.AppliedClass, len(classes))
	for i, c := range classes {
		caps := map[string]float64{}
		for wat, pl := range plans {
			if ceil := pl.leaves[i+1].ceil; ceil < unlimitedBps {
				caps[wat] = float64(ceil) / 1e6
			}
		}
		if len(caps) == 0 {
			caps = nil
		}
		out[c.Name] = payload.AppliedClass{CapsMbps: caps, Urgent: c.Urgent}
	}
	return out
}

// classifierOf is the program that sends a packet to the leaf of the
// first class it matches (class i to minors[i]), else to defMinor; class
// i's cgroup is the mark bit markBit(i).
func classifierOf(side classify.Side, classes []backend.Class, defMinor uint16, minors []uint16) ([]bpf.RawInstruction, error) {
	rules := make([]classify.Rule, len(classes))
	for i, c := range classes {
		rules[i] = classify.Rule{Match: c.Match, ClassID: vnl.MakeHandle(1, minors[i])}
		if c.Match.Cgroup != "" {
			rules[i].Mark = markBit(i)
		}
	}
	return classify.Program(side, rules, vnl.MakeHandle(1, defMinor))
}

// markBit is the bit of skb->mark that stands for class i's cgroup: the
// top byte, one bit per class (the packets of a cgroup two classes name
// carry both bits).
func markBit(i int) uint32 { return 1 << (24 + i) }

// cgroupMarks are the marks of classes' cgroups: bits by cgroup.
func cgroupMarks(classes []backend.Class) map[string]uint32 {
	marks := map[string]uint32{}
	for i, c := range classes {
		if c.Match.Cgroup != "" {
			marks[c.Match.Cgroup] |= markBit(i)
		}
	}
	return marks
}

// CgroupMarker marks the packets of a cgroup's sockets with bits of
// skb->mark (package cgroupmark).
type CgroupMarker interface {
	// Check tells whether a cgroup path (from the hierarchy's root) is a
	// cgroup here.
	Check(cgroup string) error
	// Set makes marks (bits by cgroup) the marks in force, read back.
	Set(marks map[string]uint32) error
	Close() error
}

// errNoMarker: the agent has no program on cgroups (no CAP_BPF).
var errNoMarker = errors.New("matching a cgroup needs a program on the cgroup that marks its packets, which needs CAP_BPF besides CAP_NET_ADMIN and the bpf() system call: this agent runs without (see deploy/mcw-agent.service and its log at start)")

// checkClasses tells whether classes can be applied on side: the
// classifier's length is bounded, and a cgroup needs marker (nil: none)
// and to exist.
func checkClasses(side classify.Side, classes []payload.Class, marker CgroupMarker) error {
	bc := make([]backend.Class, len(classes))
	for i, c := range classes {
		bc[i] = backend.Class{Name: c.Name, Match: c.Match}
		if c.Match.Cgroup == "" {
			continue
		}
		if marker == nil {
			return fmt.Errorf("mptcp-shares: class %s: %w", c.Name, errNoMarker)
		}
		if err := marker.Check(c.Match.Cgroup); err != nil {
			return fmt.Errorf("mptcp-shares: class %s: %w", c.Name, err)
		}
	}
	if _, err := classifierOf(side, bc, defaultMinor, classMinors(len(classes))); err != nil {
		return fmt.Errorf("mptcp-shares: %w", err)
	}
	return nil
}

// htbLeafClass is leaf l's HTB class under parent: rate the floor, ceil
// its ceiling, priority by urgency, bursts of burstTime of each.
func htbLeafClass(idx int, parent uint32, l leaf) *vnl.HtbClass {
	c := vnl.NewHtbClass(vnl.ClassAttrs{LinkIndex: idx, Handle: vnl.MakeHandle(1, l.minor), Parent: parent},
		vnl.HtbClassAttrs{Rate: l.rate(), Ceil: l.ceil, Buffer: burstBytes(l.rate()), Cbuffer: burstBytes(l.ceil),
			Prio: l.prio(), Quantum: leafQuantum})
	return c
}

// htbParentClass is a WAT's parent class of leaves: rate = ceil = bps.
func htbParentClass(idx int, handle, parent uint32, bps uint64) *vnl.HtbClass {
	c := htbClass(vnl.ClassAttrs{LinkIndex: idx, Handle: handle, Parent: parent}, bps)
	c.Quantum = leafQuantum
	return c
}

// burstBytes is burstTime of bps, at least minBurstBytes.
func burstBytes(bps uint64) uint32 {
	return uint32(min(max(float64(bps)/8*burstTime, minBurstBytes), math.MaxUint32))
}

// hasHTB tells whether classes hold handle under parent at rate and ceil
// (bit/s) with prio.
func hasHTB(classes []vnl.Class, handle, parent uint32, rate, ceil uint64, prio uint32) bool {
	for _, c := range classes {
		if h, ok := c.(*vnl.HtbClass); ok && h.Handle == handle {
			return h.Parent == parent && h.Rate == rate/8 && h.Ceil == ceil/8 && h.Prio == prio
		}
	}
	return false
}
