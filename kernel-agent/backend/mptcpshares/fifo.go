package mptcpshares

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// queueTime is how much of its rate a class's leaf queue may hold. HTB's
// default leaf is a pfifo of txqueuelen (1000) packets: at 14 Mbit/s
// that is ~860 ms of queue, at 6 Mbit/s ~2 s, and when every WAT is
// capped the subflows' RTTs balloon until MPTCP's connection-level window
// stalls on the slow subflow's late data. A bfifo of 100 ms keeps the
// RTTs short; the sender sees a local drop as congestion and backs off.
const queueTime = 0.100

// minQueueBytes lets one full-size GSO packet (64 KB) into the queue at
// any rate: a bfifo drops every packet longer than its limit.
const minQueueBytes = 65536

// maxQueueBytes bounds the limit (the netlink field is 32-bit).
const maxQueueBytes = 1 << 30

// queueBytes is the byte limit of the leaf queue of a class capped at bps.
func queueBytes(bps uint64) uint32 {
	return uint32(min(max(uint64(float64(bps)/8*queueTime), minQueueBytes), maxQueueBytes))
}

// leafHandle is the handle of the bfifo under class 1:minor: major =
// minor, except 2 for the CPE backend's class 1:1 (major 1 is the root).
func leafHandle(minor uint16) uint32 {
	return vnl.MakeHandle(max(minor, 2), 0)
}

// Bfifo is a bfifo qdisc as read back: where it hangs and its byte limit.
type Bfifo struct {
	Parent, Handle uint32
	Limit          uint32
}

// Handle is a netlink handle in the namespace it was made in that also
// writes and reads bfifo qdiscs with their limit, which the netlink
// library does not model (it writes them with no options, so with the
// interface's default limit, and reads back no limit).
type Handle struct {
	*vnl.Handle
	mu   sync.Mutex
	sock *nl.NetlinkSocket
	seq  uint32
}

// NewHandle returns a Handle in the calling thread's network namespace.
func NewHandle() (*Handle, error) {
	h, err := vnl.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle: %w", err)
	}
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	return &Handle{Handle: h, sock: s}, nil
}

// Close closes both sockets.
func (h *Handle) Close() {
	h.Handle.Close()
	h.sock.Close()
}

func (h *Handle) request(cmd, flags int) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(cmd, flags)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: h.sock, Seq: h.seq}}
	h.seq++
	return req
}

// BfifoReplace makes (or replaces) the bfifo handle under parent on
// interface linkIndex with a limit of limitBytes.
func (h *Handle) BfifoReplace(linkIndex int, parent, handle, limitBytes uint32) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	req := h.request(unix.RTM_NEWQDISC, unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(linkIndex), Handle: handle, Parent: parent})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("bfifo")))
	// struct tc_fifo_qopt { __u32 limit; }, host order.
	req.AddData(nl.NewRtAttr(nl.TCA_OPTIONS, binary.NativeEndian.AppendUint32(nil, limitBytes)))
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("bfifo %x: under %x: %w", handle>>16, parent, err)
	}
	return nil
}

// BfifoList returns the bfifo qdiscs of interface linkIndex.
func (h *Handle) BfifoList(linkIndex int) ([]Bfifo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	req := h.request(unix.RTM_GETQDISC, unix.NLM_F_DUMP)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(linkIndex)})
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWQDISC)
	if err != nil {
		return nil, fmt.Errorf("list qdiscs: %w", err)
	}
	var out []Bfifo
	for _, m := range msgs {
		q, ok, err := parseBfifo(m, linkIndex)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, q)
		}
	}
	return out, nil
}

// parseBfifo reads one RTM_NEWQDISC payload: ok when it is a bfifo of
// linkIndex with its limit.
func parseBfifo(m []byte, linkIndex int) (Bfifo, bool, error) {
	if len(m) < nl.SizeofTcMsg {
		return Bfifo{}, false, fmt.Errorf("qdisc message of %d bytes: want >= %d", len(m), nl.SizeofTcMsg)
	}
	msg := nl.DeserializeTcMsg(m)
	if int(msg.Ifindex) != linkIndex {
		return Bfifo{}, false, nil
	}
	attrs, err := nl.ParseRouteAttr(m[nl.SizeofTcMsg:])
	if err != nil {
		return Bfifo{}, false, fmt.Errorf("qdisc attributes: %w", err)
	}
	kind, limit, hasLimit := "", uint32(0), false
	for _, a := range attrs {
		switch a.Attr.Type {
		case nl.TCA_KIND:
			if n := len(a.Value); n > 0 {
				kind = string(a.Value[:n-1])
			}
		case nl.TCA_OPTIONS:
			if len(a.Value) >= 4 {
				limit, hasLimit = binary.NativeEndian.Uint32(a.Value), true
			}
		}
	}
	if kind != "bfifo" {
		return Bfifo{}, false, nil
	}
	if !hasLimit {
		return Bfifo{}, false, errors.New("bfifo without its limit")
	}
	return Bfifo{Parent: msg.Parent, Handle: msg.Handle, Limit: limit}, true, nil
}

// setLeaf bounds class parent's queue at queueBytes(bps) and reads it back.
func setLeaf(n Netlink, idx int, minor uint16, bps uint64) error {
	parent, handle, limit := vnl.MakeHandle(1, minor), leafHandle(minor), queueBytes(bps)
	if err := n.BfifoReplace(idx, parent, handle, limit); err != nil {
		return fmt.Errorf("leaf queue of 1:%x: %w", minor, err)
	}
	return checkLeaf(n, idx, minor, bps)
}

// checkLeaf reads back the bfifo under class 1:minor.
func checkLeaf(n Netlink, idx int, minor uint16, bps uint64) error {
	qs, err := n.BfifoList(idx)
	if err != nil {
		return fmt.Errorf("verify leaf queue of 1:%x: %w", minor, err)
	}
	want := Bfifo{Parent: vnl.MakeHandle(1, minor), Handle: leafHandle(minor), Limit: queueBytes(bps)}
	for _, q := range qs {
		if q.Parent == want.Parent {
			if q != want {
				return fmt.Errorf("verify: leaf queue of 1:%x is bfifo %x: limit %d B, want %x: limit %d B", minor, q.Handle>>16, q.Limit, want.Handle>>16, want.Limit)
			}
			return nil
		}
	}
	return fmt.Errorf("verify: leaf queue of 1:%x missing", minor)
}
