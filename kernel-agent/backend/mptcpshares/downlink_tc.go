package mptcpshares

import (
	"encoding/binary"
	"errors"
	"net/netip"

	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// rootFor is the Downlink's root qdisc on interface idx: HTB 1: without a
// default class, so packets no filter claims take HTB's direct queue.
func rootFor(idx int) *vnl.Htb {
	q := vnl.NewHtb(vnl.QdiscAttrs{LinkIndex: idx, Handle: rootHandle, Parent: vnl.HANDLE_ROOT})
	q.Defcls = 0
	return q
}

// classFor is cl's HTB class: rate and ceil at the cap, so it never
// borrows (there is no parent class to borrow from); a leaf's under its
// (CPE, WAT) class (leafClassFor).
func classFor(cl class) *vnl.HtbClass {
	if cl.leaf {
		return leafClassFor(cl)
	}
	if cl.inner {
		return htbParentClass(cl.ifindex, vnl.MakeHandle(1, cl.minor), rootHandle, cl.bps)
	}
	return htbClass(vnl.ClassAttrs{LinkIndex: cl.ifindex, Handle: vnl.MakeHandle(1, cl.minor), Parent: rootHandle}, cl.bps)
}

// leafClassFor is a leaf's HTB class (see htbLeafClass).
func leafClassFor(cl class) *vnl.HtbClass {
	return htbLeafClass(cl.ifindex, vnl.MakeHandle(1, cl.parentMinor), leaf{minor: cl.minor, ceil: cl.bps, urgent: cl.urgent})
}

// ethProto is the filter protocol for addr's family.
func ethProto(addr netip.Addr) uint16 {
	if addr.Is4() {
		return unix.ETH_P_IP
	}
	return unix.ETH_P_IPV6
}

// filterFor is cl's u32 filter at preference cl.minor: the IPv4
// destination (offset 16 of the IP header) or the four words of the IPv6
// destination (offsets 24-36) equal to cl.addr send to class 1:minor.
func filterFor(cl class) *vnl.U32 {
	var keys []nl.TcU32Key
	if cl.addr.Is4() {
		a := cl.addr.As4()
		keys = []nl.TcU32Key{{Mask: 0xffffffff, Val: binary.BigEndian.Uint32(a[:]), Off: 16}}
	} else {
		a := cl.addr.As16()
		for i := range 4 {
			keys = append(keys, nl.TcU32Key{Mask: 0xffffffff, Val: binary.BigEndian.Uint32(a[4*i:]), Off: int32(24 + 4*i)})
		}
	}
	return &vnl.U32{
		FilterAttrs: vnl.FilterAttrs{LinkIndex: cl.ifindex, Parent: rootHandle, Priority: cl.minor, Protocol: ethProto(cl.addr)},
		ClassId:     vnl.MakeHandle(1, cl.minor),
		Sel:         &nl.TcU32Sel{Flags: nl.TC_U32_TERMINAL, Keys: keys},
	}
}

// filterDelFor names the whole preference cl.minor (handle 0), which
// removes cl's filter with its hash table.
func filterDelFor(cl class) *vnl.U32 {
	return &vnl.U32{FilterAttrs: vnl.FilterAttrs{LinkIndex: cl.ifindex, Parent: rootHandle, Priority: cl.minor, Protocol: ethProto(cl.addr)}}
}

// hasClass tells whether classes holds cl at its cap.
func hasClass(classes []vnl.Class, cl class) bool {
	for _, c := range classes {
		if h, ok := c.(*vnl.HtbClass); ok && h.Handle == vnl.MakeHandle(1, cl.minor) {
			return h.Rate == cl.bps/8 && h.Ceil == cl.bps/8
		}
	}
	return false
}

// hasFilter tells whether filters holds cl's filter: its preference,
// protocol, class and keys.
func hasFilter(filters []vnl.Filter, cl class) bool {
	want := filterFor(cl)
	for _, f := range filters {
		u, ok := f.(*vnl.U32)
		if !ok || u.Priority != cl.minor || u.ClassId != want.ClassId || u.Sel == nil || u.Protocol != want.Protocol {
			continue
		}
		if len(u.Sel.Keys) != len(want.Sel.Keys) {
			continue
		}
		same := true
		for i, k := range want.Sel.Keys {
			g := u.Sel.Keys[i]
			same = same && g.Mask == k.Mask && g.Val == k.Val && g.Off == k.Off
		}
		if same {
			return true
		}
	}
	return false
}

// isNotFound tells a delete of something already gone.
func isNotFound(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV)
}
