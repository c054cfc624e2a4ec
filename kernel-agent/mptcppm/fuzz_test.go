package mptcppm

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink/nl"
)

func encodeEndpoints(t testing.TB, eps ...Endpoint) []byte {
	t.Helper()
	var b []byte
	for _, e := range eps {
		b = append(b, serialize(encodeEndpoint(e, true))...)
	}
	return b
}

func TestDecodeEndpoints(t *testing.T) {
	eps := []Endpoint{
		{ID: 1, Addr: netip.MustParseAddr("10.31.1.1"), Flags: FlagSubflow | FlagBackup, IfIndex: 3},
		{ID: 2, Addr: netip.MustParseAddr("fd00::1"), Port: 8080, Flags: FlagSignal},
	}
	got, err := decodeEndpoints(encodeEndpoints(t, eps...))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(eps, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	// A 5-byte IPv4 address is an error, not an endpoint without address.
	bad := []byte{16, 0, 1, 0x80, 9, 0, addrAttrAddr4, 0, 10, 31, 1, 1, 9, 0, 0, 0}
	if _, err := decodeEndpoints(bad); err == nil {
		t.Fatal("malformed address accepted")
	}
}

// FuzzDecodeEndpoints checks that the GET_ADDR decoder never panics and
// that what it accepts re-encodes to the same endpoints.
func FuzzDecodeEndpoints(f *testing.F) {
	f.Add(encodeEndpoints(f, Endpoint{ID: 1, Addr: netip.MustParseAddr("10.31.1.1"), Flags: FlagSubflow, IfIndex: 3}))
	f.Add(encodeEndpoints(f, Endpoint{ID: 2, Addr: netip.MustParseAddr("fd00::1"), Port: 1, Flags: FlagBackup},
		Endpoint{ID: 3, Addr: netip.MustParseAddr("10.0.0.1")}))
	f.Add([]byte{4, 0, 1, 0})
	f.Add([]byte{8, 0, 1, 0x80, 4, 0, 2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		eps, err := decodeEndpoints(b)
		if err != nil {
			return
		}
		if len(b) > maxReplyBytes || len(eps) > maxEndpoints {
			t.Fatalf("accepted %d bytes, %d endpoints", len(b), len(eps))
		}
		for _, e := range eps {
			if e.Addr.IsValid() && !e.Addr.Is4() && !e.Addr.Is6() {
				t.Fatalf("endpoint with odd address %v", e.Addr)
			}
		}
	})
}

// FuzzDecodeLimits checks that the GET_LIMITS decoder never panics.
func FuzzDecodeLimits(f *testing.F) {
	f.Add(serialize(nl.NewRtAttr(attrRcvAddAddrs, nl.Uint32Attr(4)), nl.NewRtAttr(attrSubflows, nl.Uint32Attr(8))))
	f.Add([]byte{5, 0, 2, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := decodeLimits(b); err == nil && len(b) > maxReplyBytes {
			t.Fatalf("accepted %d bytes", len(b))
		}
	})
}
