//go:build linux

// Package cgroupmark marks the packets of a cgroup's sockets for the
// traffic classes' classifier, which cannot see a packet's cgroup itself
// (a classic BPF program): a cgroup-v2 inet-egress program (eBPF,
// assembled in Go as package pacing's, so CAP_BPF besides CAP_NET_ADMIN
// and the bpf() system call) ORs the class's bit into skb->mark of every
// packet a socket of the cgroup, or of a cgroup below it, sends. The hook
// runs after routing and netfilter, before the qdisc: the mark is only
// read by the classifier then. An MPTCP subflow is in its connection's
// cgroup (the kernel attaches it there), so a connection's subflows on
// every WAT are marked; sockets created before the program was attached
// are marked too (the hook reads the socket's cgroup per packet).
package cgroupmark

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/mcw-xapp/kernel-agent/backend/mptcpshares/pacing"
)

// offMark is the offset of mark in struct __sk_buff.
const offMark = 8

// Marker holds one program per marked cgroup. It is safe for concurrent
// use.
type Marker struct {
	mount string
	mu    sync.Mutex
	att   map[string]attachment // by cgroup path from the hierarchy's root
}

type attachment struct {
	bits uint32
	prog *ebpf.Program
	link link.Link
}

// New finds the cgroup-v2 hierarchy and checks that a marking program can
// be loaded here (it cannot without CAP_BPF or the bpf() system call).
func New() (*Marker, error) {
	mount, err := pacing.CgroupV2Mount()
	if err != nil {
		return nil, fmt.Errorf("cgroupmark: %w", err)
	}
	p, err := load(0)
	if err != nil {
		return nil, err
	}
	p.Close()
	return &Marker{mount: mount, att: map[string]attachment{}}, nil
}

// Program returns the inet-egress program that ORs bits into skb->mark
// and lets the packet pass.
func Program(bits uint32) asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, offMark, asm.Word),
		asm.Or.Imm32(asm.R2, int32(bits)),
		asm.StoreMem(asm.R1, offMark, asm.R2, asm.Word),
		asm.Mov.Imm(asm.R0, 1),
		asm.Return(),
	}
}

func load(bits uint32) (*ebpf.Program, error) {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "mcw_class_mark", Type: ebpf.CGroupSKB, License: "GPL",
		AttachType: ebpf.AttachCGroupInetEgress, Instructions: Program(bits)})
	if err != nil {
		return nil, fmt.Errorf("cgroupmark: load the marking program (needs CAP_BPF and the bpf() system call): %w", err)
	}
	return p, nil
}

// dir is cgroup's directory.
func (m *Marker) dir(cgroup string) string { return filepath.Join(m.mount, cgroup) }

// Check tells whether cgroup (a path from the hierarchy's root) is a
// cgroup here.
func (m *Marker) Check(cgroup string) error {
	fi, err := os.Stat(m.dir(cgroup))
	if err != nil || !fi.IsDir() {
		return fmt.Errorf("cgroup %s: not a cgroup under %s (%v)", cgroup, m.mount, err)
	}
	return nil
}

// Set makes marks (bits by cgroup) the marks in force: programs of cgroups
// no longer marked, or marked with other bits, are detached, the new ones
// attached, and each cgroup's attached programs read back.
func (m *Marker) Set(marks map[string]uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for cg, a := range m.att {
		if bits, ok := marks[cg]; ok && bits == a.bits {
			continue
		}
		errs = append(errs, a.close())
		delete(m.att, cg)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cgroupmark: %w", err)
	}
	for cg, bits := range marks {
		if _, ok := m.att[cg]; ok {
			continue
		}
		p, err := load(bits)
		if err != nil {
			return err
		}
		l, err := link.AttachCgroup(link.CgroupOptions{Path: m.dir(cg), Attach: ebpf.AttachCGroupInetEgress, Program: p})
		if err != nil {
			p.Close()
			return fmt.Errorf("cgroupmark: attach to cgroup %s: %w", cg, err)
		}
		m.att[cg] = attachment{bits: bits, prog: p, link: l}
	}
	for cg, a := range m.att {
		if err := m.verify(cg, a); err != nil {
			return err
		}
	}
	return nil
}

// verify reads back that a's program is attached to cgroup's egress hook.
func (m *Marker) verify(cgroup string, a attachment) error {
	info, err := a.prog.Info()
	if err != nil {
		return fmt.Errorf("cgroupmark: verify %s: %w", cgroup, err)
	}
	id, _ := info.ID()
	f, err := os.Open(m.dir(cgroup))
	if err != nil {
		return fmt.Errorf("cgroupmark: verify %s: %w", cgroup, err)
	}
	defer f.Close()
	q, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupInetEgress})
	if err != nil {
		return fmt.Errorf("cgroupmark: verify %s: %w", cgroup, err)
	}
	for _, p := range q.Programs {
		if p.ID == id {
			return nil
		}
	}
	return fmt.Errorf("cgroupmark: verify: the marking program is not attached to cgroup %s", cgroup)
}

func (a attachment) close() error {
	return errors.Join(a.link.Close(), a.prog.Close())
}

// Close detaches every program.
func (m *Marker) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for cg, a := range m.att {
		errs = append(errs, a.close())
		delete(m.att, cg)
	}
	return errors.Join(errs...)
}
