package mptcpshares

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/mcw-xapp/kernel-agent/backend/mptcpupstream"
)

// TestSharesDownlinkMessages: the class, filter and root the Downlink writes
// for a (CPE, WAT), field by field.
func TestSharesDownlinkMessages(t *testing.T) {
	for name, tc := range map[string]struct {
		cl    class
		proto uint16
		keys  []nl.TcU32Key
	}{
		"ipv4": {class{minor: 2, ifindex: 7, addr: netip.MustParseAddr("10.34.2.1"), bps: 8_571_428}, unix.ETH_P_IP,
			[]nl.TcU32Key{{Mask: 0xffffffff, Val: 0x0a220201, Off: 16}}},
		"ipv6": {class{minor: 0x1234, ifindex: 3, addr: netip.MustParseAddr("fd00::1:2"), bps: 64_000}, unix.ETH_P_IPV6,
			[]nl.TcU32Key{{Mask: 0xffffffff, Val: 0xfd000000, Off: 24}, {Mask: 0xffffffff, Off: 28},
				{Mask: 0xffffffff, Off: 32}, {Mask: 0xffffffff, Val: 0x00010002, Off: 36}}},
	} {
		t.Run(name, func(t *testing.T) {
			f := filterFor(tc.cl)
			want := &vnl.U32{
				FilterAttrs: vnl.FilterAttrs{LinkIndex: tc.cl.ifindex, Parent: vnl.MakeHandle(1, 0), Priority: tc.cl.minor, Protocol: tc.proto},
				ClassId:     vnl.MakeHandle(1, tc.cl.minor),
				Sel:         &nl.TcU32Sel{Flags: nl.TC_U32_TERMINAL, Keys: tc.keys},
			}
			if diff := cmp.Diff(want, f); diff != "" {
				t.Errorf("filter (-want +got):\n%s", diff)
			}
			if !hasFilter([]vnl.Filter{&vnl.U32{FilterAttrs: f.FilterAttrs}, f}, tc.cl) {
				t.Error("hasFilter does not find the filter filterFor built")
			}
			other := tc.cl
			other.minor++
			if hasFilter([]vnl.Filter{f}, other) {
				t.Error("hasFilter matched another preference")
			}
			d := filterDelFor(tc.cl)
			if d.Sel != nil || d.ClassId != 0 || d.Priority != tc.cl.minor || d.Protocol != tc.proto || d.Handle != 0 {
				t.Errorf("delete names more than the preference: %+v", d)
			}
			c := classFor(tc.cl)
			if c.Handle != vnl.MakeHandle(1, tc.cl.minor) || c.Parent != vnl.MakeHandle(1, 0) || c.Rate != tc.cl.bps/8 || c.Ceil != tc.cl.bps/8 || c.LinkIndex != tc.cl.ifindex {
				t.Errorf("class %+v for %+v", c, tc.cl)
			}
			// The burst: 10 ms of the rate, at least 3200 bytes (in ticks
			// of the rate, as the kernel takes it).
			burst := max(uint32(float64(tc.cl.bps)/8*0.010), 3200)
			if c.Buffer != vnl.Xmittime(tc.cl.bps/8, burst) || c.Cbuffer != c.Buffer {
				t.Errorf("class burst %d/%d ticks, want %d (%d bytes)", c.Buffer, c.Cbuffer, vnl.Xmittime(tc.cl.bps/8, burst), burst)
			}
			if !hasClass([]vnl.Class{c}, tc.cl) {
				t.Error("hasClass does not find the class classFor built")
			}
		})
	}
	r := rootFor(9)
	if r.Handle != vnl.MakeHandle(1, 0) || r.Parent != vnl.HANDLE_ROOT || r.Defcls != 0 || r.LinkIndex != 9 {
		t.Errorf("root %+v: want htb 1: at the root without default class", r)
	}
}

// TestSharesNumber: minors stay with their (CPE, WAT) while the interface does,
// new classes take the lowest free minor from 2, a moved class a new one.
func TestSharesNumber(t *testing.T) {
	d := &Downlink{classes: map[classKey]class{
		{"a", "nr", ""}:   {minor: 2, ifindex: 1},
		{"a", "wifi", ""}: {minor: 3, ifindex: 2},
		{"b", "nr", ""}:   {minor: 5, ifindex: 1},
	}}
	want := map[classKey]class{
		{"a", "nr", ""}:   {ifindex: 1},
		{"a", "wifi", ""}: {ifindex: 1}, // moved: minor 3 is not kept
		{"b", "nr", ""}:   {ifindex: 1},
		{"c", "lte", ""}:  {ifindex: 2},
	}
	d.number(want)
	got := map[classKey]uint16{}
	for k, cl := range want {
		got[k] = cl.minor
	}
	if diff := cmp.Diff(map[classKey]uint16{{"a", "nr", ""}: 2, {"a", "wifi", ""}: 3, {"b", "nr", ""}: 5, {"c", "lte", ""}: 4}, got,
		cmp.AllowUnexported(classKey{})); diff != "" {
		t.Errorf("minors (-want +got):\n%s", diff)
	}
}

// TestSharesNumberLeaves: a leaf keeps its minor while its (CPE, WAT)
// class keeps its own; under a renumbered (CPE, WAT) class it takes a
// new one (HTB does not move a class to another parent).
func TestSharesNumberLeaves(t *testing.T) {
	d := &Downlink{classes: map[classKey]class{
		{"a", "nr", ""}:         {minor: 2, ifindex: 1, inner: true},
		{"a", "nr", "."}:        {minor: 3, ifindex: 1, leaf: true, parentMinor: 2},
		{"a", "nr", "video"}:    {minor: 4, ifindex: 1, leaf: true, parentMinor: 2},
		{"a", "wifi", ""}:       {minor: 9, ifindex: 2, inner: true},
		{"a", "wifi", "."}:      {minor: 10, ifindex: 1, leaf: true, parentMinor: 9},
		{"b", "nr", ""}:         {minor: 7, ifindex: 1},
		{"b", "nr", "obsolete"}: {minor: 8, ifindex: 1, leaf: true, parentMinor: 7},
	}}
	want := map[classKey]class{
		{"a", "nr", ""}:      {ifindex: 1, inner: true},
		{"a", "nr", "."}:     {ifindex: 1, leaf: true},
		{"a", "nr", "video"}: {ifindex: 1, leaf: true},
		{"a", "wifi", ""}:    {ifindex: 1, inner: true}, // moved: a new minor, and its leaf (on ifindex 1 before and after) too
		{"a", "wifi", "."}:   {ifindex: 1, leaf: true},
		{"b", "nr", ""}:      {ifindex: 1},
	}
	d.number(want)
	got := map[classKey]uint16{}
	for k, cl := range want {
		got[k] = cl.minor
	}
	if diff := cmp.Diff(map[classKey]uint16{{"a", "nr", ""}: 2, {"a", "nr", "."}: 3, {"a", "nr", "video"}: 4,
		{"a", "wifi", ""}: 5, {"a", "wifi", "."}: 6, {"b", "nr", ""}: 7}, got, cmp.AllowUnexported(classKey{})); diff != "" {
		t.Errorf("minors (-want +got):\n%s", diff)
	}
}

func TestNewDownlinkRejects(t *testing.T) {
	// Typed nil handles: NewDownlink only checks that they are set.
	h, onoff := (*Handle)(nil), (*mptcpupstream.Downlink)(nil)
	for name, tc := range map[string]struct {
		cfg DownlinkConfig
		err string
	}{
		"no netlink":  {DownlinkConfig{OnOff: onoff}, "required"},
		"no on/off":   {DownlinkConfig{NL: h}, "required"},
		"rate zero":   {DownlinkConfig{NL: h, OnOff: onoff, LinkMbps: map[string]float64{"nr": 0}}, "link rate of nr"},
		"bound large": {DownlinkConfig{NL: h, OnOff: onoff, MaxClasses: maxMinor}, "max classes"},
		"bound neg":   {DownlinkConfig{NL: h, OnOff: onoff, MaxClasses: -1}, "max classes"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewDownlink(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want %q", err, tc.err)
			}
		})
	}
	d, err := NewDownlink(DownlinkConfig{NL: h, OnOff: onoff, LinkMbps: map[string]float64{"nr": 20}})
	if err != nil {
		t.Fatal(err)
	}
	if used, limit := d.Rules(); used != 0 || limit != DefaultMaxClasses {
		t.Errorf("Rules = %d, %d; want 0, %d", used, limit, DefaultMaxClasses)
	}
}
