//go:build linux

// Package pacing enforces per-WAT rate caps at the sender's TCP stack
// instead of in a qdisc: a cgroup-v2 sockops program sets
// SO_MAX_PACING_RATE on every TCP socket of the cgroup whose address is a
// capped WAT's, MPTCP subflows included (a subflow inherits its
// connection's cgroup). It is the alternative to the HTB caps of
// package mptcpshares, measured against them by
// integration.TestNetnsPacingVsCaps.
//
// The program is assembled in Go (package asm of cilium/ebpf), so the
// agent needs no clang and ships no object file. It keeps three maps:
//
//   - rates: address -> the WAT's cap in bytes/s, written by Pacer.Set;
//   - flows: address -> established sockets on that address, counted by
//     the program (up on the ESTABLISHED callbacks, down on the move to
//     TCP_CLOSE), so that a cap is divided among the WAT's subflows;
//   - stats: counters of what the program did.
//
// Per socket the cap is rate / flows, set when it is established and
// re-set on every BPF_SOCK_OPS_RTT_CB (an ACK with an RTT sample), so a
// new cap, or a subflow joining or leaving, reaches every socket within
// one RTT without a timer. A socket on an address without a rate is set
// to ~0 (unpaced). The address is the socket's local one (a CPE: its WAT
// addresses) or its remote one (a proxy: the CPE's WAT addresses), chosen
// at Attach.
//
// Limits: the division is equal, so a subflow that sends less than its
// part leaves the rest of the WAT's cap unused; sockets established
// before Attach are never seen (the program only learns of a socket from
// its callbacks); SO_MAX_PACING_RATE is 32-bit in bytes/s (34 Gbit/s);
// the flows map holds at most MaxAddrs addresses, beyond which a socket
// is paced at its address's full rate; the RTT callback costs two map
// lookups and a setsockopt per ACK on every TCP socket of the cgroup. The
// rate counts TCP payload, an HTB cap whole packets: at the same value a
// paced WAT puts about 6 % more on the wire (8.6-8.7 against 8.1-8.2
// Mbit/s for a cap of 8.57, measured below).
//
// Why pacing splits well: mainline MPTCP's default scheduler sends on the
// subflow with the least queued data per unit of its pacing rate, so a
// capped sk_pacing_rate tells the scheduler the subflow is slow before any
// queue builds, where an HTB cap only shows through the subflow's
// small-queue back-pressure.
//
// # Measured on Linux 6.18 (integration.TestNetnsPacingVsCaps)
//
// Shares topology of TestNetnsShares, bulk MPTCP uplink, bytes on the
// CPE's interfaces over 3 s, pacing and the HTB backend in the same run
// (`flock /tmp/netns-bench.lock go test -count=1 -v -run
// TestNetnsPacingVsCaps ./integration/`), ten runs on a 2-core machine
// while other helpers ran tests (load 0.4-2.5):
//
//   - fixed_split 70/30 on two 20 Mbit/s paths (nr uncapped, wifi at
//     8.57): pacing nr 68.7-69.2 %, aggregate 27.6-28.0 of the caps'
//     28.6; HTB nr 66.4-72.1 %, 24.2-29.2. Within 5 points 101-406 ms
//     after the map write (pacing), 101-406 ms after the weights message
//     (HTB, through MQTT and the agent); mostly the first 100 ms window.
//   - load_balancing on 24/16/8: the first window after pacing starts
//     (10 or 1 times the link rates) 25.0-45.5 Mbit/s of 48; every later
//     window, paced at 1 or 1.25 times the link rates or cleared again,
//     45.5-45.7 at 50/33/17 in all eight runs that had them. The HTB
//     backend leaves every WAT uncapped there (the default scheduler):
//     31.8-50.6 in the window after the weights; followed to the paced
//     steps' ages, the same unpaced connection gave 45.6-45.8 in one run
//     and 27.2-42.0 and 33.8-42.9 in two others. Internal TCP pacing,
//     which SO_MAX_PACING_RATE turns on and a cleared cap leaves on,
//     steadies the default scheduler here.
package pacing

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// KeyBy selects which address of a socket names its WAT.
type KeyBy int

const (
	// LocalAddr keys on the socket's own address: the CPE's uplink.
	LocalAddr KeyBy = iota
	// RemoteAddr keys on the peer's address: a proxy's downlink to a
	// CPE's WAT address.
	RemoteAddr
)

// MaxAddrs bounds the rates and flows maps.
const MaxAddrs = 4096

// MaxBps is the largest cap in bits/s: SO_MAX_PACING_RATE takes a 32-bit
// bytes/s value from a BPF program, and ~0 means unpaced.
const MaxBps = (1<<32 - 2) * 8

// Kernel ABI numbers the program uses (include/uapi/linux/bpf.h,
// socket.h, net/tcp_states.h).
const (
	opActiveEstablished  = 4  // BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB
	opPassiveEstablished = 5  // BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB
	opState              = 10 // BPF_SOCK_OPS_STATE_CB
	opRTT                = 12 // BPF_SOCK_OPS_RTT_CB
	flagState            = 4  // BPF_SOCK_OPS_STATE_CB_FLAG
	flagRTT              = 8  // BPF_SOCK_OPS_RTT_CB_FLAG
	tcpClose             = 7  // TCP_CLOSE
	afInet               = 2
	afInet6              = 10
	solSocket            = 1
	soMaxPacingRate      = 47
	updateNoExist        = 1          // BPF_NOEXIST
	unpaced              = 0xFFFFFFFF // ~0U: SO_MAX_PACING_RATE's "no limit"

	// struct bpf_sock_ops offsets.
	ctxOp         = 0
	ctxArg0       = 4
	ctxArg1       = 8
	ctxFamily     = 20
	ctxRemoteIP4  = 24
	ctxLocalIP4   = 28
	ctxRemoteIP6  = 32
	ctxLocalIP6   = 48
	ctxIsFullsock = 72
)

// Counters in the stats map, by index.
const (
	StatEstablished = iota // sockets counted on an ESTABLISHED callback
	StatClosed             // sockets uncounted on their move to TCP_CLOSE
	StatPaced              // setsockopt calls with a finite rate that succeeded
	StatFailed             // setsockopt calls that failed
	numStats
)

// Stack slots of the program (offsets from the frame pointer).
const (
	stKey   = -16 // 16-byte address key
	stValue = -24 // u64 scratch for map updates
	stRate  = -28 // u32 optval for setsockopt
	stIndex = -32 // u32 stats index
)

// Stats is what the program counted since Attach.
type Stats struct {
	Established, Closed, Paced, Failed uint64
}

// ErrClosed is returned by a Pacer's methods after Close or the end of
// Attach's context.
var ErrClosed = errors.New("pacing: closed")

// Pacer is a loaded and attached program with its maps. Its methods are
// safe for concurrent use, Close included (the context's end closes it
// on a goroutine of its own).
type Pacer struct {
	rates, flows, stats *ebpf.Map
	prog                *ebpf.Program
	link                link.Link
	stop                func() bool

	// mu guards closed: the maps' descriptors must not be closed under a
	// running lookup.
	mu       sync.RWMutex
	closed   bool
	closeErr error
}

// Attach loads the program, attaches it to the cgroup-v2 directory
// cgroupPath and returns the Pacer; it is detached and closed when ctx is
// done or Close is called.
func Attach(ctx context.Context, cgroupPath string, by KeyBy) (*Pacer, error) {
	if by != LocalAddr && by != RemoteAddr {
		return nil, fmt.Errorf("pacing: key %d: want LocalAddr or RemoteAddr", by)
	}
	p := &Pacer{}
	var err error
	fail := func(what string, err error) (*Pacer, error) {
		p.release()
		return nil, fmt.Errorf("pacing: %s: %w", what, err)
	}
	if p.rates, err = ebpf.NewMap(&ebpf.MapSpec{Name: "mcw_pace_rates", Type: ebpf.Hash, KeySize: 16, ValueSize: 8, MaxEntries: MaxAddrs}); err != nil {
		return fail("rates map", err)
	}
	if p.flows, err = ebpf.NewMap(&ebpf.MapSpec{Name: "mcw_pace_flows", Type: ebpf.Hash, KeySize: 16, ValueSize: 8, MaxEntries: MaxAddrs}); err != nil {
		return fail("flows map", err)
	}
	if p.stats, err = ebpf.NewMap(&ebpf.MapSpec{Name: "mcw_pace_stats", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: numStats}); err != nil {
		return fail("stats map", err)
	}
	if p.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "mcw_pace", Type: ebpf.SockOps, License: "GPL",
		Instructions: Program(by, p.rates.FD(), p.flows.FD(), p.stats.FD()),
	}); err != nil {
		return fail("load sockops program", err)
	}
	if p.link, err = link.AttachCgroup(link.CgroupOptions{Path: cgroupPath, Attach: ebpf.AttachCGroupSockOps, Program: p.prog}); err != nil {
		return fail("attach to cgroup "+cgroupPath, err)
	}
	p.stop = context.AfterFunc(ctx, func() { _ = p.Close() })
	return p, nil
}

// Close detaches the program and releases the maps. Sockets keep the
// pacing rate they last had.
func (p *Pacer) Close() error {
	if p.stop != nil {
		p.stop()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		p.closeErr = p.release()
	}
	return p.closeErr
}

// open takes the read lock for a method; it fails once the Pacer is
// closed. The caller releases with p.mu.RUnlock.
func (p *Pacer) open() error {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (p *Pacer) release() error {
	var errs []error
	if p.link != nil {
		if err := p.link.Close(); err != nil {
			errs = append(errs, fmt.Errorf("pacing: detach: %w", err))
		}
	}
	if p.prog != nil {
		if err := p.prog.Close(); err != nil {
			errs = append(errs, fmt.Errorf("pacing: close program: %w", err))
		}
	}
	for _, m := range []*ebpf.Map{p.rates, p.flows, p.stats} {
		if m == nil {
			continue
		}
		if err := m.Close(); err != nil {
			errs = append(errs, fmt.Errorf("pacing: close map: %w", err))
		}
	}
	return errors.Join(errs...)
}

// key is the map key of addr: IPv4 as v4-mapped IPv6, which is also what
// the program builds for AF_INET sockets.
func key(addr netip.Addr) ([16]byte, error) {
	if !addr.IsValid() {
		return [16]byte{}, errors.New("invalid address")
	}
	return addr.Unmap().As16(), nil
}

// Set caps the sockets on addr together at bps bits/s (divided equally
// among them). It reaches established sockets on their next RTT sample.
func (p *Pacer) Set(addr netip.Addr, bps uint64) error {
	if bps < 8 || bps > MaxBps {
		return fmt.Errorf("pacing: cap of %v: %d bit/s out of [8, %d]", addr, bps, uint64(MaxBps))
	}
	k, err := key(addr)
	if err != nil {
		return fmt.Errorf("pacing: cap: %w", err)
	}
	if err := p.open(); err != nil {
		return err
	}
	defer p.mu.RUnlock()
	if err := p.rates.Update(k, bps/8, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("pacing: cap of %v at %d bit/s: %w", addr, bps, err)
	}
	return nil
}

// Clear removes addr's cap; its sockets are unpaced on their next RTT
// sample. Clearing an address without a cap is not an error.
func (p *Pacer) Clear(addr netip.Addr) error {
	k, err := key(addr)
	if err != nil {
		return fmt.Errorf("pacing: clear: %w", err)
	}
	if err := p.open(); err != nil {
		return err
	}
	defer p.mu.RUnlock()
	if err := p.rates.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("pacing: clear %v: %w", addr, err)
	}
	return nil
}

// Caps returns the caps in bits/s by address.
func (p *Pacer) Caps() (map[netip.Addr]uint64, error) {
	if err := p.open(); err != nil {
		return nil, err
	}
	defer p.mu.RUnlock()
	out := map[netip.Addr]uint64{}
	var k [16]byte
	var v uint64
	it := p.rates.Iterate()
	for it.Next(&k, &v) {
		out[netip.AddrFrom16(k).Unmap()] = v * 8
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("pacing: read caps: %w", err)
	}
	return out, nil
}

// Flows returns how many established sockets of the cgroup the program
// counts on addr.
func (p *Pacer) Flows(addr netip.Addr) (int64, error) {
	k, err := key(addr)
	if err != nil {
		return 0, fmt.Errorf("pacing: flows: %w", err)
	}
	if err := p.open(); err != nil {
		return 0, err
	}
	defer p.mu.RUnlock()
	var v uint64
	if err := p.flows.Lookup(k, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("pacing: flows on %v: %w", addr, err)
	}
	return int64(v), nil
}

// Stats reads the program's counters.
func (p *Pacer) Stats() (Stats, error) {
	if err := p.open(); err != nil {
		return Stats{}, err
	}
	defer p.mu.RUnlock()
	var v [numStats]uint64
	for i := range v {
		if err := p.stats.Lookup(uint32(i), &v[i]); err != nil {
			return Stats{}, fmt.Errorf("pacing: stats %d: %w", i, err)
		}
	}
	return Stats{Established: v[StatEstablished], Closed: v[StatClosed], Paced: v[StatPaced], Failed: v[StatFailed]}, nil
}

// Program returns the sockops program over the maps whose descriptors are
// given, keyed by the socket's local or remote address.
func Program(by KeyBy, rates, flows, stats int) asm.Instructions {
	ip4, ip6 := int16(ctxLocalIP4), int16(ctxLocalIP6)
	if by == RemoteAddr {
		ip4, ip6 = ctxRemoteIP4, ctxRemoteIP6
	}
	// Bytes 8-11 of a v4-mapped IPv6 address (00 00 ff ff) as a u32 in
	// this machine's byte order, so that the store puts them in memory in
	// network order.
	v4Mapped := int64(int32(binary.NativeEndian.Uint32([]byte{0, 0, 0xff, 0xff})))
	var p asm.Instructions
	// R6 holds the context and R7 the op for the whole program: helper
	// calls clobber R1-R5 only.
	p = append(p,
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, ctxOp, asm.Word),
		// Only the callbacks that change a socket's rate or count; every
		// other op (RTO, header options...) returns at once.
		asm.JEq.Imm(asm.R7, opActiveEstablished, "ours"),
		asm.JEq.Imm(asm.R7, opPassiveEstablished, "ours"),
		asm.JEq.Imm(asm.R7, opState, "ours"),
		asm.JEq.Imm(asm.R7, opRTT, "ours"),
		asm.Ja.Label("out"),
		// Addresses are only readable on full sockets (not request or
		// time-wait minisockets).
		asm.LoadMem(asm.R1, asm.R6, ctxIsFullsock, asm.Word).WithSymbol("ours"),
		asm.JEq.Imm(asm.R1, 0, "out"),
		// The key: the IPv6 address, or the v4-mapped form of the IPv4
		// one, so that one map serves both families.
		asm.LoadMem(asm.R1, asm.R6, ctxFamily, asm.Word),
		asm.JEq.Imm(asm.R1, afInet6, "key6"),
		asm.JNE.Imm(asm.R1, afInet, "out"),
		asm.StoreImm(asm.RFP, stKey, 0, asm.Word),
		asm.StoreImm(asm.RFP, stKey+4, 0, asm.Word),
		asm.StoreImm(asm.RFP, stKey+8, v4Mapped, asm.Word),
		asm.LoadMem(asm.R1, asm.R6, ip4, asm.Word),
		asm.StoreMem(asm.RFP, stKey+12, asm.R1, asm.Word),
		asm.Ja.Label("keyed"),
	)
	for i := int16(0); i < 4; i++ {
		ld := asm.LoadMem(asm.R1, asm.R6, ip6+4*i, asm.Word)
		if i == 0 {
			ld = ld.WithSymbol("key6")
		}
		p = append(p, ld, asm.StoreMem(asm.RFP, stKey+4*i, asm.R1, asm.Word))
	}
	p = append(p,
		asm.JEq.Imm(asm.R7, opState, "state").WithSymbol("keyed"),
		asm.JEq.Imm(asm.R7, opRTT, "pace"),
	)
	// ESTABLISHED (active or passive): ask for the RTT callback (the
	// re-check) and the state callback (the uncount at close), then count
	// the socket on its address. The entry is created at 0 unless it
	// exists (two sockets may race here), then incremented atomically.
	p = append(p,
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, flagRTT|flagState),
		asm.FnSockOpsCbFlagsSet.Call(),
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, stValue, asm.R1, asm.DWord),
		asm.LoadMapPtr(asm.R1, flows),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stKey),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, stValue),
		asm.Mov.Imm(asm.R4, updateNoExist),
		asm.FnMapUpdateElem.Call(),
		asm.LoadMapPtr(asm.R1, flows),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stKey),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pace"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
	)
	p = append(p, bump(stats, StatEstablished)...)
	p = append(p, asm.Ja.Label("pace"))

	// STATE: only sockets this program counted get the callback (it set
	// the flag when it counted them); uncount once, on the move into
	// TCP_CLOSE.
	p = append(p,
		asm.LoadMem(asm.R1, asm.R6, ctxArg1, asm.Word).WithSymbol("state"),
		asm.JNE.Imm(asm.R1, tcpClose, "out"),
		asm.LoadMem(asm.R1, asm.R6, ctxArg0, asm.Word),
		asm.JEq.Imm(asm.R1, tcpClose, "out"),
		asm.LoadMapPtr(asm.R1, flows),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stKey),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Imm(asm.R1, -1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
	)
	p = append(p, bump(stats, StatClosed)...)
	p = append(p, asm.Ja.Label("out"))

	// PACE (after ESTABLISHED, and on every RTT sample): the address's
	// rate divided by its flow count, or ~0 (unpaced) without a rate. A
	// count below 1 (a socket counted before a map was full, uncounted
	// after) divides by 1 rather than by 0 or a wrapped value.
	p = append(p,
		asm.LoadMapPtr(asm.R1, rates).WithSymbol("pace"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stKey),
		asm.FnMapLookupElem.Call(),
		asm.LoadImm(asm.R8, unpaced, asm.DWord),
		asm.JEq.Imm(asm.R0, 0, "set"),
		asm.LoadMem(asm.R8, asm.R0, 0, asm.DWord),
		asm.LoadMapPtr(asm.R1, flows),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stKey),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "clamp"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.JSLE.Imm(asm.R1, 1, "clamp"),
		asm.Div.Reg(asm.R8, asm.R1),
		// A rate of 0 would stop the socket and ~0 would unpace it: keep
		// a capped socket within [1, ~0 - 1] bytes/s.
		asm.JNE.Imm(asm.R8, 0, "hi").WithSymbol("clamp"),
		asm.Mov.Imm(asm.R8, 1),
		asm.LoadImm(asm.R1, unpaced-1, asm.DWord).WithSymbol("hi"),
		asm.JLE.Reg(asm.R8, asm.R1, "set"),
		asm.Mov.Reg(asm.R8, asm.R1),
		asm.StoreMem(asm.RFP, stRate, asm.R8, asm.Word).WithSymbol("set"),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, solSocket),
		asm.Mov.Imm(asm.R3, soMaxPacingRate),
		asm.Mov.Reg(asm.R4, asm.RFP),
		asm.Add.Imm(asm.R4, stRate),
		asm.Mov.Imm(asm.R5, 4),
		asm.FnSetsockopt.Call(),
		asm.JNE.Imm(asm.R0, 0, "failed"),
		// Count only finite rates: the unpaced ~0 of every ACK of an
		// uncapped socket would drown the figure.
		asm.LoadImm(asm.R1, unpaced, asm.DWord),
		asm.JEq.Reg(asm.R8, asm.R1, "out"),
	)
	p = append(p, bump(stats, StatPaced)...)
	p = append(p, asm.Ja.Label("out"))
	failed := bump(stats, StatFailed)
	failed[0] = failed[0].WithSymbol("failed")
	p = append(p, failed...)

	// The return value of a sockops program is its reply for ops that
	// ask one; 1 is "no opinion" for the ones seen here.
	p = append(p, asm.Mov.Imm(asm.R0, 1).WithSymbol("out"), asm.Return())
	return p
}

// bump returns instructions that add 1 to stats[index] and fall through
// (the skip is by raw offset so the block needs no label of its own).
func bump(stats int, index int) asm.Instructions {
	// Over the Mov and the atomic add when the lookup found nothing.
	skip := asm.Instruction{OpCode: asm.JEq.Op(asm.ImmSource), Dst: asm.R0, Offset: 2}
	return asm.Instructions{
		asm.StoreImm(asm.RFP, stIndex, int64(index), asm.Word),
		asm.LoadMapPtr(asm.R1, stats),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stIndex),
		asm.FnMapLookupElem.Call(),
		skip,
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
	}
}
