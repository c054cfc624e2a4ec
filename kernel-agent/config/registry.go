package config

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// The operator's registry (cpe_prefixes) is what stops one CPE from
// claiming another's address, so the proxy refuses a registry that cannot
// do that: prefixes of two CPEs that overlap (a claim in the overlap would
// be either CPE's), prefixes so broad that they name a network rather
// than one CPE's WAT addresses, and ranges whose addresses are not one
// host's global address.

// MinPrefixBits4 and MinPrefixBits6 are the floors of a registered
// prefix's length. A CPE has one address per WAT, from its operator's pool
// for that WAT; a /16 (65,536 IPv4 addresses) or a /48 (the largest block
// RFC 6177 foresees for one end site) is already far more than one CPE
// holds, so anything broader is a pool of many subscribers typed as one
// CPE's, which would let that CPE steer the downlink of every host in it.
const (
	MinPrefixBits4 = 16
	MinPrefixBits6 = 48
)

// MaxFloorBlocks bounds a CPE's registered address space per family to
// this many floor-sized blocks (four /16s of IPv4, four /48s of IPv6): one
// per WAT. Without it a list of many prefixes at the floor could still
// cover most of the address space (a set of /16s covering nearly all of
// IPv4).
const MaxFloorBlocks = 4

// reservedRanges are refused in a registry: a prefix overlapping one is
// not made of global unicast addresses of one host. The ranges that embed
// an IPv4 address (NAT64, 6to4, Teredo, IPv4-mapped) would be a second
// spelling of IPv4 hosts, possibly other CPEs, that the overlap check over
// the IPv4 entries cannot see; link-local addresses are the same on every
// link and mean nothing without a zone.
var reservedRanges = []struct {
	pfx netip.Prefix
	why string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\" (RFC 791)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "IPv4 link-local"},
	{netip.MustParsePrefix("224.0.0.0/4"), "IPv4 multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved IPv4 (with the broadcast address)"},
	{netip.MustParsePrefix("64:ff9b::/96"), "the NAT64 well-known prefix (embeds IPv4 addresses)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "the NAT64 local-use prefix (embeds IPv4 addresses)"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped (embeds IPv4 addresses)"},
	{netip.MustParsePrefix("::/8"), "reserved IPv6 (unspecified, loopback, IPv4-compatible)"},
	{netip.MustParsePrefix("2001::/32"), "Teredo (embeds IPv4 addresses)"},
	{netip.MustParsePrefix("2002::/16"), "6to4 (embeds IPv4 addresses)"},
	{netip.MustParsePrefix("fe80::/10"), "IPv6 link-local"},
	{netip.MustParsePrefix("fec0::/10"), "IPv6 site-local (deprecated)"},
	{netip.MustParsePrefix("ff00::/8"), "IPv6 multicast"},
}

// checkRegistryPrefix reports why p cannot be one CPE's registered prefix
// (p is masked and its address passed payload.CheckWATAddr).
func checkRegistryPrefix(p netip.Prefix) error {
	floor := MinPrefixBits6
	if p.Addr().Is4() {
		floor = MinPrefixBits4
	}
	if p.Bits() < floor {
		return fmt.Errorf("broader than /%d, the floor for one CPE's addresses (a /%d names a network, not a CPE)", floor, p.Bits())
	}
	for _, r := range reservedRanges {
		if p.Overlaps(r.pfx) {
			return fmt.Errorf("overlaps %s, %s", r.pfx, r.why)
		}
	}
	return nil
}

// regEntry is cpe_prefixes[id][i]; ok when it passed the checks of one
// entry on its own.
type regEntry struct {
	id  string
	i   int
	pfx netip.Prefix
	ok  bool
}

func (e regEntry) String() string { return fmt.Sprintf("cpe_prefixes[%s][%d] %s", e.id, e.i, e.pfx) }

// checkRegistry reports the entries that overlap another's, naming both
// (an entry already refused on its own too: the operator learns of the
// clash with the first fix), and the CPEs whose valid prefixes add up to
// more than MaxFloorBlocks floor-sized blocks.
func checkRegistry(all []regEntry) []error {
	var errs []error
	// Counted in units of the smallest block either family needs here (an
	// IPv4 address, an IPv6 /64; a longer IPv6 prefix counts as a /64):
	// valid entries are at the floors, so the sums stay within uint64.
	v4, v6 := map[string]uint64{}, map[string]uint64{}
	var ids []string
	for _, e := range all {
		if _, seen := v4[e.id]; !seen {
			ids = append(ids, e.id)
			v4[e.id], v6[e.id] = 0, 0
		}
		switch {
		case !e.ok:
		case e.pfx.Addr().Is4():
			v4[e.id] += 1 << (32 - e.pfx.Bits())
		default:
			v6[e.id] += 1 << (64 - min(e.pfx.Bits(), 64))
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		if v4[id] > MaxFloorBlocks<<(32-MinPrefixBits4) {
			errs = append(errs, fmt.Errorf("cpe_prefixes[%s]: %d IPv4 addresses, more than %d /%d (one per WAT)", id, v4[id], MaxFloorBlocks, MinPrefixBits4))
		}
		if v6[id] > MaxFloorBlocks<<(64-MinPrefixBits6) {
			errs = append(errs, fmt.Errorf("cpe_prefixes[%s]: IPv6 prefixes adding up to more than %d /%d (one per WAT)", id, MaxFloorBlocks, MinPrefixBits6))
		}
	}
	all = slices.Clone(all)
	// Two prefixes either nest or are disjoint. Sorted by first address,
	// then broadest first, an entry overlaps an earlier one exactly when
	// it lies within the last entry that did not itself lie within an
	// earlier one.
	slices.SortStableFunc(all, func(x, y regEntry) int {
		if c := x.pfx.Addr().Compare(y.pfx.Addr()); c != 0 {
			return c
		}
		if c := cmp.Compare(x.pfx.Bits(), y.pfx.Bits()); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(x.id, y.id), cmp.Compare(x.i, y.i))
	})
	var cover regEntry
	for _, e := range all {
		if cover.pfx.IsValid() && cover.pfx.Overlaps(e.pfx) {
			what := "overlap"
			if cover.pfx == e.pfx {
				what = "are the same prefix"
			}
			why := "an address in both would be either CPE's, so neither could be trusted with it"
			if cover.id == e.id {
				why = "list each address once"
			}
			errs = append(errs, fmt.Errorf("%s and %s %s: %s", cover, e, what, why))
			continue
		}
		cover = e
	}
	return errs
}
