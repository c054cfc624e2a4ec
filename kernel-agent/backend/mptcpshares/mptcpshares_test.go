package mptcpshares

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/payload"
)

func TestSharesCaps(t *testing.T) {
	links := map[string]float64{"nr": 24, "wifi": 16, "lifi": 8}
	for name, tc := range map[string]struct {
		weights map[string]int
		want    map[string]uint64
		err     string
	}{
		// Proportional to the link rates: every WAT's share is its link.
		"load balancing": {map[string]int{"nr": 24, "wifi": 16, "lifi": 8}, map[string]uint64{"nr": 0, "wifi": 0, "lifi": 0}, ""},
		// T = min(24*3, 16*3, 8*3) = 24: lifi binds, the others get 8.
		"equal": {map[string]int{"nr": 1, "wifi": 1, "lifi": 1}, map[string]uint64{"nr": 8e6, "wifi": 8e6, "lifi": 0}, ""},
		// T = min(24/0.7, 16/0.3) = 34.29: nr binds, wifi 10.29.
		"70/30": {map[string]int{"nr": 70, "wifi": 30}, map[string]uint64{"nr": 0, "wifi": 10285714}, ""},
		"off":   {map[string]int{"nr": 3, "wifi": 0, "lifi": 1}, map[string]uint64{"nr": 0, "wifi": 0, "lifi": 0}, ""},
		// nr binds at 24 (T = 24*255/254); lifi's share is tiny but above
		// HTB's floor.
		"tiny share": {map[string]int{"nr": 254, "lifi": 1}, map[string]uint64{"nr": 0, "lifi": 94488}, ""},
		"all zero":   {map[string]int{"nr": 0, "wifi": 0}, nil, "every weight is 0"},
		"no rate":    {map[string]int{"nr": 1, "lte": 1}, nil, "no link rate configured for lte"},
		"negative":   {map[string]int{"nr": -1, "wifi": 2}, nil, "out of"},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := New(nil, nil, nil, links, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			var paths []backend.Path
			for wat, w := range tc.weights {
				paths = append(paths, backend.Path{WAT: wat, Weight: w})
			}
			got, err := b.Caps(paths)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for wat, w := range tc.want {
				if d := int64(got[wat]) - int64(w); d > 1 || d < -1 {
					t.Errorf("%s: cap %d bit/s, want %d", wat, got[wat], w)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("caps %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNewRejectsRates(t *testing.T) {
	for name, rates := range map[string]map[string]float64{
		"zero":     {"nr": 0},
		"negative": {"nr": -3},
		"too fast": {"nr": MaxLinkMbps + 1},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(nil, nil, nil, rates, nil, nil); err == nil {
				t.Fatalf("rates %v accepted", rates)
			}
		})
	}
}

// TestSharesCapsFromMessage: caps_mbps in the weights message decide over the
// configured link rates; weight 0 stays uncapped whatever its cap.
func TestSharesCapsFromMessage(t *testing.T) {
	links := map[string]float64{"nr": 24, "wifi": 16, "lifi": 8}
	type wc struct {
		weight int
		cap    float64
	}
	for name, tc := range map[string]struct {
		paths map[string]wc
		want  map[string]uint64
		err   string
	}{
		// The configured rates would give nr uncapped, wifi 10.29.
		"70/30 from the message":   {map[string]wc{"nr": {70, 14}, "wifi": {30, 6}}, map[string]uint64{"nr": 14e6, "wifi": 6e6}, ""},
		"weight 0 ignores its cap": {map[string]wc{"nr": {1, 5}, "wifi": {0, 3}}, map[string]uint64{"nr": 5e6, "wifi": 0}, ""},
		// A cap at or above the link rate: the link is the limit.
		"cap above the link": {map[string]wc{"nr": {1, 30}, "lifi": {1, 4}}, map[string]uint64{"nr": 0, "lifi": 4e6}, ""},
		// A WAT the message gives no cap is uncapped, not derived.
		"one WAT without cap": {map[string]wc{"nr": {1, 0}, "wifi": {1, 2}}, map[string]uint64{"nr": 0, "wifi": 2e6}, ""},
		// Caps need no configured rate (the proxy may not know a WAT's).
		"no link rate needed": {map[string]wc{"lte": {1, 12.5}, "nr": {1, 3}}, map[string]uint64{"lte": 12.5e6, "nr": 3e6}, ""},
		"tiny cap floored":    {map[string]wc{"nr": {1, 0.001}}, map[string]uint64{"nr": minCapBps}, ""},
		"negative cap":        {map[string]wc{"nr": {1, -1}}, nil, "cap -1"},
		"cap too big":         {map[string]wc{"nr": {1, 100001}}, nil, "out of"},
		"all zero":            {map[string]wc{"nr": {0, 4}}, nil, "every weight is 0"},
	} {
		t.Run(name, func(t *testing.T) {
			var paths []backend.Path
			for wat, p := range tc.paths {
				paths = append(paths, backend.Path{WAT: wat, Weight: p.weight, CapMbps: p.cap})
			}
			got, err := CapsBps(paths, links)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("caps (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKeepUrgentCaps: a WAT an urgent class uses keeps a cap at its link
// rate where the message's cap reached it; any other WAT, or a cap from
// the link rates, is left as CapsBps has it.
func TestKeepUrgentCaps(t *testing.T) {
	links := map[string]float64{"nr": 16, "wifi": 40}
	urgent := func(nr, wifi int) backend.Class {
		return backend.Class{Name: "control", Urgent: true, Weights: payload.Weights{"nr": nr, "wifi": wifi}}
	}
	bulk := backend.Class{Name: "bulk", Weights: payload.Weights{"nr": 1, "wifi": 1}}
	for _, tc := range []struct {
		name    string
		paths   []backend.Path
		classes []backend.Class
		want    map[string]uint64
	}{{
		name:    "urgent WAT's cap above its link: held at the link rate",
		paths:   []backend.Path{{WAT: "nr", Weight: 5, CapMbps: 17.5}, {WAT: "wifi", Weight: 5, CapMbps: 50}},
		classes: []backend.Class{urgent(1, 0)},
		want:    map[string]uint64{"nr": 16e6, "wifi": 0},
	}, {
		name:    "urgent WAT's cap under its link: as asked",
		paths:   []backend.Path{{WAT: "nr", Weight: 5, CapMbps: 12}, {WAT: "wifi", Weight: 5, CapMbps: 50}},
		classes: []backend.Class{urgent(1, 0)},
		want:    map[string]uint64{"nr": 12e6, "wifi": 0},
	}, {
		name:    "no urgent class: the link is the limit",
		paths:   []backend.Path{{WAT: "nr", Weight: 5, CapMbps: 17.5}, {WAT: "wifi", Weight: 5, CapMbps: 50}},
		classes: []backend.Class{bulk},
		want:    map[string]uint64{"nr": 0, "wifi": 0},
	}, {
		name:    "urgent class off the WAT",
		paths:   []backend.Path{{WAT: "nr", Weight: 5, CapMbps: 17.5}, {WAT: "wifi", Weight: 5, CapMbps: 50}},
		classes: []backend.Class{urgent(0, 1)},
		want:    map[string]uint64{"nr": 0, "wifi": 40e6},
	}, {
		name:    "default rule off the WAT: no cap",
		paths:   []backend.Path{{WAT: "nr", Weight: 0, CapMbps: 17.5}, {WAT: "wifi", Weight: 5, CapMbps: 50}},
		classes: []backend.Class{urgent(1, 0)},
		want:    map[string]uint64{"nr": 0, "wifi": 0},
	}, {
		name:    "caps from the link rates: untouched",
		paths:   []backend.Path{{WAT: "nr", Weight: 5}, {WAT: "wifi", Weight: 5}},
		classes: []backend.Class{urgent(1, 0)},
		want:    map[string]uint64{"nr": 0, "wifi": 16e6},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			caps, err := CapsBps(tc.paths, links)
			if err != nil {
				t.Fatal(err)
			}
			keepUrgentCaps(caps, tc.paths, tc.classes, links)
			if diff := cmp.Diff(tc.want, caps); diff != "" {
				t.Errorf("caps (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCapsMbps(t *testing.T) {
	got := capsMbps(map[string]uint64{"nr": 0, "wifi": 8571428, "lifi": minCapBps})
	if diff := cmp.Diff(map[string]float64{"wifi": 8.571428, "lifi": 0.064}, got); diff != "" {
		t.Errorf("capsMbps (-want +got):\n%s", diff)
	}
}

func TestQueueBytes(t *testing.T) {
	for _, tc := range []struct {
		bps  uint64
		want uint32
	}{
		{64_000, 65536},    // floor: one 64 KiB GSO packet
		{5_242_880, 65536}, // 100 ms is exactly the floor
		{6e6, 75_000},      // 100 ms of 6 Mbit/s
		{14e6, 175_000},    // 100 ms of 14 Mbit/s
		{30_000e6, 375e6},  // the largest link rate
		{1 << 40, 1 << 30}, // bounded
	} {
		if got := queueBytes(tc.bps); got != tc.want {
			t.Errorf("queueBytes(%d) = %d, want %d", tc.bps, got, tc.want)
		}
	}
}

func TestParseBfifo(t *testing.T) {
	msg := func(ifindex int32, attrs ...*nl.RtAttr) []byte {
		b := (&nl.TcMsg{Ifindex: ifindex, Parent: vnl.MakeHandle(1, 3), Handle: vnl.MakeHandle(3, 0)}).Serialize()
		for _, a := range attrs {
			b = append(b, a.Serialize()...)
		}
		return b
	}
	kind := func(k string) *nl.RtAttr { return nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated(k)) }
	limit := nl.NewRtAttr(nl.TCA_OPTIONS, binary.NativeEndian.AppendUint32(nil, 75_000))
	for name, tc := range map[string]struct {
		m      []byte
		ok     bool
		err    string
		parsed Bfifo
	}{
		"bfifo":         {m: msg(7, kind("bfifo"), limit), ok: true, parsed: Bfifo{Parent: vnl.MakeHandle(1, 3), Handle: vnl.MakeHandle(3, 0), Limit: 75_000}},
		"other link":    {m: msg(8, kind("bfifo"), limit)},
		"other kind":    {m: msg(7, kind("pfifo"), limit)},
		"no limit":      {m: msg(7, kind("bfifo")), err: "without its limit"},
		"short header":  {m: []byte{0, 0, 0}, err: "want >= 20"},
		"cut attribute": {m: append(msg(7), 0x20, 0, 1, 0), err: "attributes"},
	} {
		t.Run(name, func(t *testing.T) {
			q, ok, err := parseBfifo(tc.m, 7)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || ok != tc.ok || q != tc.parsed {
				t.Fatalf("parseBfifo = %+v, %v, %v; want %+v, %v", q, ok, err, tc.parsed, tc.ok)
			}
		})
	}
}
