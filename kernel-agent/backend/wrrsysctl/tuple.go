package wrrsysctl

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Tuple is one rule of net.mptcp.mptcp_wrr_li_weights: subflows from Src:SrcPort
// to Dst:DstPort get Weight. Zero addresses and ports are wildcards. Ports are
// host numbers here; the text carries them in network byte order.
type Tuple struct {
	Src     netip.Addr
	Dst     netip.Addr
	Weight  int
	SrcPort uint16
	DstPort uint16
}

// EncodeIPv4 returns the kernel's decimal form of an IPv4 address: the
// network-byte-order u32 read as a little-endian host integer, so 10.0.0.20
// becomes 335544330. The invalid (zero) Addr encodes as 0, the wildcard.
func EncodeIPv4(a netip.Addr) (uint32, error) {
	if !a.IsValid() {
		return 0, nil
	}
	if !a.Is4() {
		return 0, fmt.Errorf("%s is not an IPv4 address", a)
	}
	b := a.As4()
	return binary.LittleEndian.Uint32(b[:]), nil
}

// DecodeIPv4 is the inverse of EncodeIPv4; 0 (the wildcard) decodes to the
// invalid Addr.
func DecodeIPv4(v uint32) netip.Addr {
	if v == 0 {
		return netip.Addr{}
	}
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// EncodePort returns a port in network byte order read as a little-endian
// host integer (80 becomes 20480), the form the WRR kernel expects.
func EncodePort(p uint16) uint16 { return p>>8 | p<<8 }

// DecodePort is the inverse of EncodePort (a byte swap is its own inverse).
func DecodePort(p uint16) uint16 { return EncodePort(p) }

// Format renders tuples as the sysctl's flat, space-separated list of
// 5-tuples "src_ip dst_ip weight src_port dst_port".
func Format(tuples []Tuple) (string, error) {
	fields := make([]string, 0, 5*len(tuples))
	for i, t := range tuples {
		src, err := EncodeIPv4(t.Src)
		if err != nil {
			return "", fmt.Errorf("tuple %d: src: %w", i, err)
		}
		dst, err := EncodeIPv4(t.Dst)
		if err != nil {
			return "", fmt.Errorf("tuple %d: dst: %w", i, err)
		}
		if t.Weight < 0 || t.Weight > 255 {
			return "", fmt.Errorf("tuple %d: weight %d outside [0, 255]", i, t.Weight)
		}
		fields = append(fields,
			strconv.FormatUint(uint64(src), 10),
			strconv.FormatUint(uint64(dst), 10),
			strconv.Itoa(t.Weight),
			strconv.FormatUint(uint64(EncodePort(t.SrcPort)), 10),
			strconv.FormatUint(uint64(EncodePort(t.DstPort)), 10))
	}
	return strings.Join(fields, " "), nil
}

// Bounds of the sysctl's text: the agent writes one tuple per WAT (at most
// 4, under 250 bytes); rules of other writers are tolerated up to
// MaxTuples, and the kernel prints a sysctl within one page.
const (
	MaxTextBytes = 16384
	MaxTuples    = 256
)

// Parse reads the sysctl's text back into tuples; any whitespace separates
// fields (the kernel may print tabs or a trailing newline). The text's size
// and the number of tuples are bounded before fields are split.
func Parse(text string) ([]Tuple, error) {
	if len(text) > MaxTextBytes {
		return nil, fmt.Errorf("%d bytes, at most %d", len(text), MaxTextBytes)
	}
	f := strings.Fields(text)
	if len(f) > 5*MaxTuples {
		return nil, fmt.Errorf("%d fields, at most %d tuples", len(f), MaxTuples)
	}
	if len(f)%5 != 0 {
		return nil, fmt.Errorf("%d fields, not a multiple of 5", len(f))
	}
	out := make([]Tuple, 0, len(f)/5)
	for i := 0; i < len(f); i += 5 {
		var v [5]uint64
		for j, bits := range [5]int{32, 32, 8, 16, 16} {
			n, err := strconv.ParseUint(f[i+j], 10, bits)
			if err != nil {
				return nil, fmt.Errorf("tuple %d field %d: %w", i/5, j, err)
			}
			v[j] = n
		}
		out = append(out, Tuple{
			Src:     DecodeIPv4(uint32(v[0])),
			Dst:     DecodeIPv4(uint32(v[1])),
			Weight:  int(v[2]),
			SrcPort: DecodePort(uint16(v[3])),
			DstPort: DecodePort(uint16(v[4])),
		})
	}
	return out, nil
}
