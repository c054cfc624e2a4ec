// Package telemetry reads the kernel's per-subflow TCP statistics through
// sock_diag (NETLINK_SOCK_DIAG, inet_diag with tcp_info) and sums them per
// WAT, a WAT's subflows being the TCP sockets whose source address is the
// WAT interface's address. Among the sums is saturated, the share of the
// interval the WAT's subflows were held by the path, from their chrono
// times, congestion windows, send queues, RTTs against the least RTT, and
// retransmission timeouts (see Aggregator).
package telemetry

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Subflow is one TCP socket's statistics.
type Subflow struct {
	Src, Dst     netip.Addr
	SrcPort      uint16
	DstPort      uint16
	Cookie       uint64
	MPTCP        bool   // the socket runs the "mptcp" ULP (an MPTCP subflow)
	RTTMicros    uint32 // smoothed RTT
	Cwnd         uint32 // segments
	BytesAcked   uint64
	BytesRecv    uint64
	DeliveryRate uint64 // bytes per second: the kernel's latest rate sample
	// DeliveryRateAppLimited marks the rate sample as taken while the
	// sender had too little data to fill cwnd (a lower bound, not capacity).
	DeliveryRateAppLimited bool
	SndMSS                 uint32
	Unacked                uint32 // segments in flight (tcpi_unacked, packets_out)
	NotsentBytes           uint32 // written by the sender, not yet sent

	// DataSegsOut counts the segments with data the socket sent,
	// retransmissions included (tcpi_data_segs_out); TotalRetrans the
	// segments it retransmitted (tcpi_total_retrans), which also counts
	// segments without data (a retransmitted SYN or SYN-ACK). Both are
	// cumulative over the socket's life and wrap at 2^32.
	DataSegsOut  uint32
	TotalRetrans uint32

	// MinRTTMicros is the least RTT the socket measured (tcpi_min_rtt,
	// over a window of minutes: sysctl tcp_min_rtt_wlen); 0 when unknown.
	MinRTTMicros uint32

	// LastAckRecvMillis is the time since the socket last received an
	// ACK (tcpi_last_ack_recv; dupACKs count).
	LastAckRecvMillis uint32

	// Retransmission timeouts: CAState is the congestion-avoidance state
	// (tcpi_ca_state; caLoss after a timeout, until the loss is repaired),
	// Backoff how many times the retransmission (or zero-window probe)
	// timer has backed off since the last progress (tcpi_backoff). RTOs
	// counts the timeouts (tcpi_total_rto, 16 bits, wrapping) and
	// RTORecoveryMillis the whole time spent recovering from them, the
	// unfinished recovery included (tcpi_total_rto_time); both are Linux
	// 6.7's, HasRTOTime is false when the kernel's tcp_info is too short
	// to carry them.
	CAState           uint8
	Backoff           uint8
	HasRTOTime        bool
	RTOs              uint16
	RTORecoveryMillis uint32

	// Chrono statistics (tcp_info since Linux 4.10), cumulative over the
	// socket's life in microseconds at jiffy resolution. BusyMicros is the
	// whole time the socket had data queued or in flight and includes the
	// two limited times; the rest of it was limited by cwnd, i.e. by the
	// path. The limited times say what held the sender, not that the path
	// had room: a sender held by a window larger than the path's
	// bandwidth-delay product still fills the path (see NetworkQueued).
	// And on an MPTCP subflow the send-buffer time is the connection's: a
	// subflow shares the MPTCP socket's struct socket, so the kernel starts
	// the chrono when the application blocks on the connection's buffer
	// and stops it only on an ACK of that subflow that finds the
	// connection writable, which a bulk writer, always blocked, never lets
	// it see: the subflow's busy time piles up as send-buffer limited
	// while its congestion window holds it. HasChrono is false when the
	// kernel's tcp_info is too short to carry them.
	HasChrono           bool
	BusyMicros          uint64
	RwndLimitedMicros   uint64
	SndbufLimitedMicros uint64
}

// PathLimitedMicros is the cumulative time the socket was busy but limited
// neither by the receiver's window nor by its send buffer: the time its
// congestion window, i.e. the path, was the bottleneck.
func (s Subflow) PathLimitedMicros() uint64 {
	limited := s.RwndLimitedMicros + s.SndbufLimitedMicros
	if limited >= s.BusyMicros {
		return 0
	}
	return s.BusyMicros - limited
}

// caLoss is tcpi_ca_state's TCP_CA_Loss (include/net/tcp.h): the sender
// timed out, collapsed its window to a segment and resends what it lost.
const caLoss = 4

// InRTORecovery tells whether the socket is recovering from a
// retransmission timeout: in TCP_CA_Loss, or with its timer backed off
// (an RTO, or zero-window probes, without progress since). Its window is
// then the timeout's and its smoothed RTT the one from before it, often
// seconds stale: neither measures the path.
func (s Subflow) InRTORecovery() bool { return s.CAState == caLoss || s.Backoff > 0 }

// NetworkQueued tells whether the smoothed RTT shows a standing queue in
// the network: at least QueueRTTRatio times the least RTT and QueueMinDelay
// above it. A queue stands only where a link sends at its full rate: the
// path is the limit of whatever feeds it, whether the sender was held by
// its congestion window, the receiver's window or its send buffer.
func (s Subflow) NetworkQueued() bool {
	rtt, least := float64(s.RTTMicros), float64(s.MinRTTMicros)
	return least > 0 && rtt >= QueueRTTRatio*least && rtt-least >= float64(QueueMinDelay.Microseconds())
}

// inet_diag constants (linux/inet_diag.h, linux/sock_diag.h).
const (
	sockDiagByFamily = 20
	attrInfo         = 2  // INET_DIAG_INFO: struct tcp_info
	attrULPInfo      = 19 // INET_DIAG_ULP_INFO: nested, INET_ULP_INFO_NAME = 1
	ulpInfoName      = 1
	tcpEstablished   = 1
	ipprotoTCP       = 6
	afInet           = 2
	sizeofReqV2      = 56
	sizeofDiagMsg    = 72
)

// Offsets in struct tcp_info (include/uapi/linux/tcp.h), an ABI that only
// grows at its end: checked against the 6.1 uapi header and the 6.18 layout,
// which appends tcpi_rcv_wnd and later fields after tcpi_snd_wnd (228).
// Linux 5.4 (the 5G-CLARITY WRR kernel) already carries every field read
// here. Fields up to tcpi_delivery_rate are required; the chrono times and
// tcpi_total_rto_time (Linux 6.7) are read when present.
const (
	offCAState       = 1
	offBackoff       = 4
	offFlags7        = 7 // tcpi_delivery_rate_app_limited:1 is bit 0 of byte 7
	offSndMSS        = 16
	offUnacked       = 24
	offRTT           = 68
	offSndCwnd       = 80
	offTotalRetrans  = 100
	offBytesAcked    = 120
	offBytesRecv     = 128
	offNotsentBytes  = 144
	offMinRTT        = 148
	offDataSegsOut   = 156
	offDeliveryRate  = 160
	offBusyTime      = 168
	offRwndLimited   = 176
	offSndbufLimited = 184
	offLastAckRecv   = 56
	offTotalRTO      = 240 // u16, then tcpi_total_rto_recoveries (u16)
	offTotalRTOTime  = 244
	minTCPInfoLen    = offDeliveryRate + 8
	chronoTCPInfoLen = offSndbufLimited + 8
	rtoTCPInfoLen    = offTotalRTOTime + 4
)

// appLimitedBit is the mask of tcpi_delivery_rate_app_limited, the first
// bit-field of its byte: C compilers allocate bit-fields from the least
// significant bit on little-endian targets and from the most significant
// one on big-endian targets (MIPS and PowerPC CPEs exist).
func appLimitedBit() byte {
	if binary.NativeEndian.Uint16([]byte{0, 1}) == 1 {
		return 0x80
	}
	return 0x01
}

// request builds the inet_diag_req_v2 asking for established IPv4 TCP
// sockets with tcp_info.
func request() []byte {
	b := make([]byte, sizeofReqV2)
	b[0] = afInet
	b[1] = ipprotoTCP
	b[2] = 1 << (attrInfo - 1) // idiag_ext: INET_DIAG_INFO
	binary.NativeEndian.PutUint32(b[4:8], 1<<tcpEstablished)
	return b
}

var errShort = errors.New("short inet_diag message")

// Bounds of one inet_diag message: the kernel sends about 400 bytes with a
// handful of attributes (tcp_info is under 300 bytes on 6.18); far more is
// not a message the request asked for.
const (
	maxMessageBytes = 8192
	maxAttributes   = 64
)

// parseMessage decodes one inet_diag_msg with its attributes. The socket id
// is big-endian (network order); tcp_info is host order. Size and
// attribute count are bounded before anything is read.
func parseMessage(b []byte) (Subflow, error) {
	if len(b) < sizeofDiagMsg {
		return Subflow{}, errShort
	}
	if len(b) > maxMessageBytes {
		return Subflow{}, fmt.Errorf("inet_diag message of %d bytes, at most %d", len(b), maxMessageBytes)
	}
	var s Subflow
	id := b[4:52]
	s.SrcPort = binary.BigEndian.Uint16(id[0:2])
	s.DstPort = binary.BigEndian.Uint16(id[2:4])
	s.Src = netip.AddrFrom4([4]byte(id[4:8]))
	s.Dst = netip.AddrFrom4([4]byte(id[20:24]))
	s.Cookie = uint64(binary.NativeEndian.Uint32(id[40:44])) | uint64(binary.NativeEndian.Uint32(id[44:48]))<<32
	rest := b[sizeofDiagMsg:]
	for n := 0; len(rest) >= 4; n++ {
		if n == maxAttributes {
			return Subflow{}, fmt.Errorf("more than %d attributes", maxAttributes)
		}
		l := int(binary.NativeEndian.Uint16(rest[0:2]))
		typ := binary.NativeEndian.Uint16(rest[2:4]) &^ 0xc000 // strip NLA_F_NESTED/NET_BYTEORDER
		if l < 4 || l > len(rest) {
			return Subflow{}, fmt.Errorf("bad attribute length %d", l)
		}
		data := rest[4:l]
		switch typ {
		case attrInfo:
			if len(data) < minTCPInfoLen {
				return Subflow{}, fmt.Errorf("tcp_info of %d bytes, want >= %d", len(data), minTCPInfoLen)
			}
			s.RTTMicros = binary.NativeEndian.Uint32(data[offRTT:])
			s.Cwnd = binary.NativeEndian.Uint32(data[offSndCwnd:])
			s.BytesAcked = binary.NativeEndian.Uint64(data[offBytesAcked:])
			s.BytesRecv = binary.NativeEndian.Uint64(data[offBytesRecv:])
			s.DeliveryRate = binary.NativeEndian.Uint64(data[offDeliveryRate:])
			s.DeliveryRateAppLimited = data[offFlags7]&appLimitedBit() != 0
			s.SndMSS = binary.NativeEndian.Uint32(data[offSndMSS:])
			s.Unacked = binary.NativeEndian.Uint32(data[offUnacked:])
			s.NotsentBytes = binary.NativeEndian.Uint32(data[offNotsentBytes:])
			s.DataSegsOut = binary.NativeEndian.Uint32(data[offDataSegsOut:])
			s.TotalRetrans = binary.NativeEndian.Uint32(data[offTotalRetrans:])
			s.MinRTTMicros = binary.NativeEndian.Uint32(data[offMinRTT:])
			s.CAState, s.Backoff = data[offCAState], data[offBackoff]
			s.LastAckRecvMillis = binary.NativeEndian.Uint32(data[offLastAckRecv:])
			if len(data) >= chronoTCPInfoLen {
				s.HasChrono = true
				s.BusyMicros = binary.NativeEndian.Uint64(data[offBusyTime:])
				s.RwndLimitedMicros = binary.NativeEndian.Uint64(data[offRwndLimited:])
				s.SndbufLimitedMicros = binary.NativeEndian.Uint64(data[offSndbufLimited:])
			}
			if len(data) >= rtoTCPInfoLen {
				s.HasRTOTime = true
				s.RTOs = binary.NativeEndian.Uint16(data[offTotalRTO:])
				s.RTORecoveryMillis = binary.NativeEndian.Uint32(data[offTotalRTOTime:])
			}
		case attrULPInfo:
			s.MPTCP = ulpName(data) == "mptcp"
		}
		if align4(l) >= len(rest) {
			break
		}
		rest = rest[align4(l):]
	}
	return s, nil
}

func ulpName(b []byte) string {
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		if l < 4 || l > len(b) {
			return ""
		}
		if binary.NativeEndian.Uint16(b[2:4])&^0xc000 == ulpInfoName {
			s := b[4:l]
			for i, c := range s {
				if c == 0 {
					return string(s[:i])
				}
			}
			return string(s)
		}
		if align4(l) >= len(b) {
			return ""
		}
		b = b[align4(l):]
	}
	return ""
}

func align4(n int) int { return (n + 3) &^ 3 }
