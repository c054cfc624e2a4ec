// Package mptcpshares is the mainline-Linux backend that gives WATs real
// shares rather than only on/off. Mainline MPTCP has one scheduler
// ("default"), which sends on the subflow that can take data soonest; a
// subflow whose interface is rate-capped by an egress qdisc fills its
// TCP-small-queues budget and stops taking data, so the default scheduler
// moves the rest to the other subflows. Capping each WAT's egress at its
// share of a total therefore turns the scheduler's "fastest first" into
// the requested split.
//
// One rule (CapsBps) decides the caps, two enforcers set them: HTB
// (New, described below) or the pacing of each socket on a WAT address
// by a BPF sockops program (NewPaced, package pacing; only the sockets
// of its cgroup, opened after it was attached; no qdisc touched).
//
// Per WAT interface the HTB enforcer owns the root qdisc: HTB with one class
// (1:1, the default class) whose rate and ceil are the WAT's cap, and
// under it a bfifo of 100 ms of the cap (see queueTime). The cap
// is share x T, where share = weight / sum of weights, and T is the largest
// total every WAT can carry at its share given the configured per-WAT link
// rates: T = min over WATs with weight > 0 of link_mbps / share. With
// load_balancing weights proportional to the link rates, T is their sum
// and each cap is the link rate. When the weights message carries
// caps_mbps (the xApp's share x forecast total x headroom, sent to agents
// that report capabilities.semantics rate-caps) those caps are used
// instead, and the configured rates only tell which caps reach the link
// (uncapped). The caps set are reported as applied_caps_mbps.
//
// Downlink (proxy role, Downlink): per served CPE and capped WAT one HTB
// class on the proxy's egress interface towards that WAT's CPE address
// (the route's), with a u32 filter on the address as destination; the
// root HTB has no default class, so other traffic is not shaped. Caps
// come from the CPE's dl caps_mbps or its dl weights x the configured
// rates, as above; the number of classes is bounded.
//
// A WAT at weight 0 is flagged backup on its MPTCP endpoint as by
// mptcp-upstream (the default scheduler sends nothing on a backup subflow
// while another one is up) and its cap is its full link rate, so that it
// still carries everything when it is the last path left. A WAT whose
// share of T is its whole link rate is left uncapped too: its own link is
// its limit, and a second queue in front of it only cost aggregate in the
// measurements (load_balancing with every WAT capped at its link rate:
// 35.9 and 36.7 Mbit/s of 48, against 38.5-46.8 uncapped).
//
// # Traffic classes
//
// With HTB (capabilities.max_classes 8; pacing has none: its cap is per
// address), a direction's classes each get a leaf under the WAT's class on
// every WAT, beside the leaf of the traffic no class takes (the default
// rule, whose weights and caps are today's), and one classic BPF program
// (package classify, CAP_NET_ADMIN alone) sends each packet to the leaf of
// the first class it matches; a class that matches a cgroup reads a mark
// that a program on the cgroup sets (package cgroupmark, CAP_BPF). A
// leaf's ceiling is the class's cap on the WAT, the WAT's cap it borrows
// up to, or the floor (64 kbit/s) on a WAT the class does not use; urgent
// classes' leaves come first and are guaranteed a tenth of their ceiling. A WAT carries the classes' tree even where
// it is uncapped (its parent is then unlimited); without classes the
// layout above is untouched. Details in classes.go. The proxy does the
// same per served CPE under each (CPE, WAT) class, the classes matching
// the packets' source.
//
// Measured through the real CPE agent (integration.TestNetnsClasses; two
// 20 Mbit/s paths, two bulk MPTCP uplinks to two ports; 6 runs, load
// average 1.5-3.2 from other work): a class for port A at weight 0 on
// wifi took A off wifi (from 3.4-7.0 Mbit/s to 0.0, under 2 % of A's
// bytes 103-239 ms after the weights message) while the other flow kept
// wifi (10.4-15.4 Mbit/s before, 15.4-18.8 after: it takes what A left);
// the same by the flow's cgroup (4.0-10.9 to 0.0-0.1 Mbit/s, 205-310 ms).
// A 200-byte request/response every 10 ms beside bulk on both WATs capped
// at 8 Mbit/s: RTT p50 40-75 ms in the default leaf, 7-11 ms in a class
// of its own, 0.2 ms in an urgent class (p95 97-107, 26-37 and 0.5-2 ms;
// 3.7-7.7 ms p50 before urgent leaves were guaranteed a tenth of their
// ceiling, see classes.go).
//
// # Measured on Linux 6.18 (integration.TestNetnsShares)
//
// CPE - router - proxy namespaces, three paths at 24/16/8 Mbit/s (tbf at
// the router, the 8 Mbit/s path with a 300 ms buffer), bulk MPTCP
// transfers, bytes counted on the CPE's interfaces over 3 s (`go test
// -count=1 -v -run TestNetnsShares ./integration/`). Four runs with 32 MB
// socket buffers at both ends (the test's setting), in brackets five runs
// with the default 4/6 MB:
//
//   - default scheduler alone: UL 26.6-44.4 [24.0-44.5], DL 22.1-38.3
//     [19.8-35.5] Mbit/s of 48;
//   - load_balancing 24/16/8 (all WATs uncapped), on the same connection
//     as the UL baseline: 38.6-46.8 [32.5-45.8];
//   - wifi at weight 0: 0.0 % of the bytes, under 2 % 103-809 [101-608]
//     ms after the weights message (what the subflow had queued drains);
//   - fixed_split 70/30 on two 20 Mbit/s paths (nr uncapped, wifi capped
//     at 8.57): nr 70.1-71.3 % [67.3-70.5], aggregate 27.2-28.3
//     [24.9-27.5] of the caps' 28.6, within 5 points 101-305 [101-507] ms
//     after the weights message.
//
// With caps_mbps and the proxy downlink (5 s windows for aggregates;
// 8 runs, 4 of them full-package runs, load average 0.5-2 from other
// work): the same 70/30 through the proxy's downlink classes nr
// 70.0-70.1 %, 27.2 of 28.6 Mbit/s, within 5 points 202-204 ms; 70/30
// with caps_mbps {nr: 14, wifi: 6} (every path capped) nr 69.9-70.0 % at
// 18.9-19.0 of 20 Mbit/s, except 64.3-65.1 % at 16.0-16.2 in the runs
// that followed the pacing test in the same process (the default
// scheduler under-fills the capped nr, and no uncapped path takes up the
// slack); load_balancing 38.3-45.6 against the default scheduler's
// 24.6-42.2 on the same connection.
//
// The bfifo leaf (100 ms of the cap) in place of HTB's default pfifo of
// 1000 packets (bench/bench_shares.py --runs 3, load average under 0.6):
// caps_mbps {nr: 14, wifi: 6} nr 12.45-13.27 Mbit/s against 10.88-13.27
// with the pfifo; fixed_split, wat_off, load_balancing and the proxy
// downlink within their earlier ranges.
//
// tcp_notsent_lowat (128 KB, 32 KB in the CPE namespace) raised the
// default scheduler's UL to 41-43 Mbit/s but lowered the capped
// load_balancing to 30-37; the backend does not set it.
//
// Limits: the caps are only as right as the configured link rates or the
// xApp's forecast: a link slower than its cap queues at its own
// bottleneck and the split drifts towards the default scheduler's. The
// root qdisc of each CPE WAT interface, and of each proxy interface that
// carries a capped CPE, is replaced (an operator's own qdisc there is
// lost). A downlink class matches one CPE address: CPEs behind one NAT
// address cannot be told apart (the mptcp-upstream downlink refuses the
// second one). Each class has a burst of 10 ms of its rate (see
// burstTime).
package mptcpshares
