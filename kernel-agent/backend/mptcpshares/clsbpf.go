package mptcpshares

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The traffic classes' classifier is a cls_bpf filter carrying a classic
// BPF program (package classify): classic programs are loaded by the
// kernel from the filter message itself, so CAP_NET_ADMIN suffices (no
// bpf() system call, no CAP_BPF). The netlink library writes only eBPF
// programs by descriptor, hence these requests.

// classifierHandle is the filter's handle within its preference (one
// filter there).
const classifierHandle = 1

// Classifier is a classic cls_bpf filter as read back.
type Classifier struct {
	Parent uint32
	Prio   uint16
	Ops    []bpf.RawInstruction
}

// ClassifierReplace makes ops the program of the cls_bpf filter at
// preference prio of parent on interface linkIndex (every protocol),
// replacing a program there in one step.
func (h *Handle) ClassifierReplace(linkIndex int, parent uint32, prio uint16, ops []bpf.RawInstruction) error {
	if len(ops) == 0 || len(ops) > 0xffff {
		return fmt.Errorf("classifier of %d instructions", len(ops))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	req := h.request(unix.RTM_NEWTFILTER, unix.NLM_F_CREATE|unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(linkIndex), Handle: classifierHandle, Parent: parent,
		Info: uint32(prio)<<16 | uint32(nl.Swap16(unix.ETH_P_ALL))})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("bpf")))
	opts := nl.NewRtAttr(nl.TCA_OPTIONS, nil)
	opts.AddRtAttr(nl.TCA_BPF_OPS_LEN, nl.Uint16Attr(uint16(len(ops))))
	opts.AddRtAttr(nl.TCA_BPF_OPS, encodeOps(ops))
	req.AddData(opts)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("classifier at %x pref %d: %w", parent, prio, err)
	}
	return nil
}

// ClassifierDel removes the filters at preference prio of parent on
// interface linkIndex.
func (h *Handle) ClassifierDel(linkIndex int, parent uint32, prio uint16) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	req := h.request(unix.RTM_DELTFILTER, unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(linkIndex), Parent: parent,
		Info: uint32(prio)<<16 | uint32(nl.Swap16(unix.ETH_P_ALL))})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("bpf")))
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("remove classifier at %x pref %d: %w", parent, prio, err)
	}
	return nil
}

// ClassifierList returns the classic cls_bpf filters of parent on
// interface linkIndex.
func (h *Handle) ClassifierList(linkIndex int, parent uint32) ([]Classifier, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	req := h.request(unix.RTM_GETTFILTER, unix.NLM_F_DUMP)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(linkIndex), Parent: parent})
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWTFILTER)
	if err != nil {
		return nil, fmt.Errorf("list filters of %x: %w", parent, err)
	}
	var out []Classifier
	for _, m := range msgs {
		c, ok, err := parseClassifier(m)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, c)
		}
	}
	return out, nil
}

// encodeOps lays ops out as struct sock_filter { u16 code; u8 jt, jf;
// u32 k; } in host order.
func encodeOps(ops []bpf.RawInstruction) []byte {
	b := make([]byte, 0, 8*len(ops))
	for _, o := range ops {
		b = binary.NativeEndian.AppendUint16(b, o.Op)
		b = append(b, o.Jt, o.Jf)
		b = binary.NativeEndian.AppendUint32(b, o.K)
	}
	return b
}

// parseClassifier reads one RTM_NEWTFILTER payload: ok when it is a
// cls_bpf filter with a classic program (the dump also lists each
// preference alone, without options).
func parseClassifier(m []byte) (Classifier, bool, error) {
	if len(m) < nl.SizeofTcMsg {
		return Classifier{}, false, fmt.Errorf("filter message of %d bytes: want >= %d", len(m), nl.SizeofTcMsg)
	}
	msg := nl.DeserializeTcMsg(m)
	attrs, err := nl.ParseRouteAttr(m[nl.SizeofTcMsg:])
	if err != nil {
		return Classifier{}, false, fmt.Errorf("filter attributes: %w", err)
	}
	kind, c := "", Classifier{Parent: msg.Parent, Prio: uint16(msg.Info >> 16)}
	var opts []byte
	for _, a := range attrs {
		switch a.Attr.Type {
		case nl.TCA_KIND:
			if n := len(a.Value); n > 0 {
				kind = string(a.Value[:n-1])
			}
		case nl.TCA_OPTIONS:
			opts = a.Value
		}
	}
	if kind != "bpf" || opts == nil {
		return Classifier{}, false, nil
	}
	inner, err := nl.ParseRouteAttr(opts)
	if err != nil {
		return Classifier{}, false, fmt.Errorf("bpf filter options: %w", err)
	}
	for _, a := range inner {
		if a.Attr.Type != nl.TCA_BPF_OPS {
			continue
		}
		if len(a.Value)%8 != 0 {
			return Classifier{}, false, fmt.Errorf("bpf filter program of %d bytes", len(a.Value))
		}
		for v := a.Value; len(v) > 0; v = v[8:] {
			c.Ops = append(c.Ops, bpf.RawInstruction{Op: binary.NativeEndian.Uint16(v), Jt: v[2], Jf: v[3], K: binary.NativeEndian.Uint32(v[4:])})
		}
		return c, true, nil
	}
	return Classifier{}, false, nil
}

// setClassifier makes prog the classifier of parent on interface idx
// unless it already is (a rewrite would be the same program), and reads
// it back.
func setClassifier(n Netlink, idx int, parent uint32, prog []bpf.RawInstruction) error {
	have, err := n.ClassifierList(idx, parent)
	if err != nil {
		return err
	}
	if !hasClassifier(have, prog) {
		if err := n.ClassifierReplace(idx, parent, classifierPrio, prog); err != nil {
			return err
		}
		if have, err = n.ClassifierList(idx, parent); err != nil {
			return fmt.Errorf("verify: %w", err)
		}
	}
	if !hasClassifier(have, prog) {
		return fmt.Errorf("verify: classifier of %x is not the classes' program", parent)
	}
	return nil
}

// hasClassifier tells whether have holds prog at classifierPrio.
func hasClassifier(have []Classifier, prog []bpf.RawInstruction) bool {
	for _, c := range have {
		if c.Prio == classifierPrio {
			return slices.Equal(c.Ops, prog)
		}
	}
	return false
}
