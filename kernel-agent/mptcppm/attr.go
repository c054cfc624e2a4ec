package mptcppm

import (
	"encoding/binary"
	"fmt"

	"github.com/vishvananda/netlink/nl"
)

// Attributes are encoded with vishvananda/netlink's nl.RtAttr, the agent's
// one netlink library, and decoded here, every length checked: the
// library's nl.ParseRouteAttr slices past the end of an unpadded last
// attribute, which a decoder of outside bytes must refuse instead.

// Attribute type flags, not part of the type.
const (
	nlaFNested    = 1 << 15
	nlaFByteOrder = 1 << 14
)

type attr struct {
	typ  uint16
	data []byte
}

// parseAttrs splits b into its attributes (the payload of a generic
// netlink message after its header, or of a nested attribute).
func parseAttrs(b []byte) ([]attr, error) {
	var out []attr
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, fmt.Errorf("attribute header of %d bytes", len(b))
		}
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		if l < 4 || l > len(b) {
			return nil, fmt.Errorf("attribute length %d of %d bytes left", l, len(b))
		}
		out = append(out, attr{typ: binary.NativeEndian.Uint16(b[2:4]) &^ (nlaFNested | nlaFByteOrder), data: b[4:l]})
		if a := (l + 3) &^ 3; a < len(b) {
			b = b[a:]
		} else {
			break
		}
	}
	return out, nil
}

func (a attr) exact(n int) error {
	if len(a.data) != n {
		return fmt.Errorf("attribute %d of %d bytes, want %d", a.typ, len(a.data), n)
	}
	return nil
}

func (a attr) u8() (uint8, error) {
	if err := a.exact(1); err != nil {
		return 0, err
	}
	return a.data[0], nil
}

func (a attr) u16() (uint16, error) {
	if err := a.exact(2); err != nil {
		return 0, err
	}
	return binary.NativeEndian.Uint16(a.data), nil
}

func (a attr) u32() (uint32, error) {
	if err := a.exact(4); err != nil {
		return 0, err
	}
	return binary.NativeEndian.Uint32(a.data), nil
}

// nested starts a nested attribute (NLA_F_NESTED set, as the kernel's
// strict policies want).
func nested(typ int) *nl.RtAttr { return nl.NewRtAttr(typ|nlaFNested, nil) }

// serialize concatenates attributes.
func serialize(attrs ...*nl.RtAttr) []byte {
	var b []byte
	for _, a := range attrs {
		b = append(b, a.Serialize()...)
	}
	return b
}
