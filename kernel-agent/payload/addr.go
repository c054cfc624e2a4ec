package payload

import (
	"fmt"
	"net/netip"
)

// AlarmAddressConflict is the alarm of a CPE whose WAT address another CPE
// served by the same proxy also claims: neither is steered until one stops.
const AlarmAddressConflict = "address-conflict"

// CheckWATAddr reports why a cannot be one CPE's own WAT address: the proxy
// writes a rule matching it, so a form that matches more than one host
// (unspecified = the WRR kernel's wildcard, multicast, broadcast), the
// proxy itself (loopback), or a second spelling of an IPv4 address
// (IPv4-mapped IPv6, which the WRR writer unmaps) would let a CPE steer
// traffic that is not its own. Zones are refused too: an address of the
// channel is global.
func CheckWATAddr(a netip.Addr) error {
	switch {
	case !a.IsValid():
		return fmt.Errorf("%w: not an IP address", ErrInvalid)
	case a.Zone() != "":
		return fmt.Errorf("%w: %s carries a zone", ErrInvalid, a)
	case a.Is4In6():
		return fmt.Errorf("%w: %s is IPv4-mapped (write the IPv4 form)", ErrInvalid, a)
	case a.IsUnspecified():
		return fmt.Errorf("%w: %s is the unspecified address (a wildcard)", ErrInvalid, a)
	case a.IsLoopback():
		return fmt.Errorf("%w: %s is a loopback address", ErrInvalid, a)
	case a.IsMulticast():
		return fmt.Errorf("%w: %s is a multicast address", ErrInvalid, a)
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("%w: %s is the broadcast address", ErrInvalid, a)
	}
	return nil
}
