package payload

import (
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"slices"
)

// Bounds of a direction's traffic classes and of a class's match; they
// match the class and match definitions of schemas/mqtt-weights.schema.json.
const (
	// MaxClasses bounds the classes of one direction.
	MaxClasses    = 8
	maxDSCPs      = 64
	maxProtocols  = 8
	maxPortRanges = 16
	maxPrefixes   = 16
	maxPrefixLen  = 43
	maxDSCP       = 63
	maxProtocol   = 255
	maxCgroupLen  = 256
)

// PortRange is an inclusive range of ports [first, last], 1 <= first <=
// last (a JSON array of two integers).
type PortRange [2]uint16

// Match is a class's traffic descriptor: a packet matches when it meets
// every key given, and a list key when any of its items does. Ports and
// prefixes are the remote end of the application's flow: the destination
// of an uplink packet, the source of a downlink one. Cgroup is the cgroup
// v2 path, from the hierarchy's root, of the sockets the class takes
// (uplink only).
type Match struct {
	DSCP           []int          `json:"dscp,omitempty"`
	Protocols      []int          `json:"protocols,omitempty"`
	RemotePorts    []PortRange    `json:"remote_ports,omitempty"`
	RemotePrefixes []netip.Prefix `json:"remote_prefixes,omitempty"`
	Cgroup         string         `json:"cgroup,omitempty"`
}

// Class is one traffic class of a direction: the packets its match takes
// follow its weights and caps instead of the direction's; Urgent asks for
// strict priority in each WAT's egress queue. The JSON form is the
// message's.
type Class struct {
	Name     string          `json:"name"`
	Match    Match           `json:"match"`
	Mode     string          `json:"mode"`
	Reason   string          `json:"reason,omitempty"`
	Weights  Weights         `json:"weights"`
	CapsMbps map[WAT]float64 `json:"caps_mbps,omitempty"`
	Urgent   bool            `json:"urgent,omitempty"`
}

var classNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// ValidClassName reports whether name can name a class (the schema's
// pattern): it is also a Prometheus label value and a state key.
func ValidClassName(name string) bool { return classNameRE.MatchString(name) }

var cgroupRE = regexp.MustCompile(`^/[A-Za-z0-9._@:/-]{0,255}$`)

// ValidateClasses checks the classes of direction dir (DL or UL) in the
// order a packet meets them: at most MaxClasses, unique names, a known
// mode, weights and caps by the rules of the direction's own (a class
// whose weights are all zero would never carry its traffic), and a match
// with at least one key whose lists are within the schema's bounds,
// without duplicates, with ranges in order and prefixes in canonical
// form; a cgroup only in the uplink (the proxy does not see the CPE's
// sockets). It is the one check of classes, for a message and for what
// the agent persisted.
func ValidateClasses(dir string, classes []Class) error {
	if len(classes) > MaxClasses {
		return fmt.Errorf("%w: %s.classes: %d classes, at most %d", ErrInvalid, dir, len(classes), MaxClasses)
	}
	seen := map[string]bool{}
	for i, c := range classes {
		name := fmt.Sprintf("%s.classes[%d]", dir, i)
		if !ValidClassName(c.Name) {
			return fmt.Errorf("%w: %s.name %q: want ^[a-z0-9][a-z0-9_-]{0,31}$", ErrInvalid, name, c.Name)
		}
		if seen[c.Name] {
			return fmt.Errorf("%w: %s: name %q twice", ErrInvalid, name, c.Name)
		}
		seen[c.Name] = true
		name = fmt.Sprintf("%s.classes[%s]", dir, c.Name)
		if !KnownMode(c.Mode) {
			return fmt.Errorf("%w: %s.mode %q: missing or unknown", ErrInvalid, name, c.Mode)
		}
		if n := len([]rune(c.Reason)); n > MaxReasonLen {
			return fmt.Errorf("%w: %s.reason: %d characters, at most %d", ErrInvalid, name, n, MaxReasonLen)
		}
		if err := checkWeightsCaps(name, c.Weights, c.CapsMbps); err != nil {
			return err
		}
		if err := checkMatch(dir, name+".match", c.Match); err != nil {
			return err
		}
	}
	return nil
}

// checkWeightsCaps checks a set's weights and caps: the weights by
// Weights.Validate, the caps known, in [MinCapMbps, MaxCapMbps] and only
// on WATs with a positive weight (a WAT at weight 0 is off, not capped).
func checkWeightsCaps(name string, w Weights, caps map[WAT]float64) error {
	if err := w.Validate(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if caps != nil && len(caps) == 0 {
		return fmt.Errorf("%w: %s.caps_mbps: empty (omit the key instead)", ErrInvalid, name)
	}
	if err := checkCaps(name+".caps_mbps", caps); err != nil {
		return err
	}
	for k, c := range caps {
		if w[k] == 0 {
			return fmt.Errorf("%w: %s.caps_mbps: %s has weight 0 or is not in the set", ErrInvalid, name, k)
		}
		if c < MinCapMbps {
			return fmt.Errorf("%w: %s.caps_mbps: %s=%g below %g", ErrInvalid, name, k, c, MinCapMbps)
		}
	}
	return nil
}

func checkMatch(dir, name string, m Match) error {
	if m.DSCP == nil && m.Protocols == nil && m.RemotePorts == nil && m.RemotePrefixes == nil && m.Cgroup == "" {
		return fmt.Errorf("%w: %s: no key (it would match everything: use the direction's own weights)", ErrInvalid, name)
	}
	if err := checkInts(name+".dscp", m.DSCP, maxDSCPs, maxDSCP); err != nil {
		return err
	}
	if err := checkInts(name+".protocols", m.Protocols, maxProtocols, maxProtocol); err != nil {
		return err
	}
	if m.RemotePorts != nil && (len(m.RemotePorts) == 0 || len(m.RemotePorts) > maxPortRanges) {
		return fmt.Errorf("%w: %s.remote_ports: %d ranges, want 1..%d", ErrInvalid, name, len(m.RemotePorts), maxPortRanges)
	}
	for _, r := range m.RemotePorts {
		if r[0] < 1 || r[0] > r[1] {
			return fmt.Errorf("%w: %s.remote_ports: [%d, %d] is not a range of ports 1..65535, first <= last", ErrInvalid, name, r[0], r[1])
		}
	}
	if m.RemotePrefixes != nil && (len(m.RemotePrefixes) == 0 || len(m.RemotePrefixes) > maxPrefixes) {
		return fmt.Errorf("%w: %s.remote_prefixes: %d prefixes, want 1..%d", ErrInvalid, name, len(m.RemotePrefixes), maxPrefixes)
	}
	for i, p := range m.RemotePrefixes {
		switch {
		case !p.IsValid():
			return fmt.Errorf("%w: %s.remote_prefixes: item %d is not a prefix", ErrInvalid, name, i)
		case p.Addr().Is4In6():
			return fmt.Errorf("%w: %s.remote_prefixes: %s: write an IPv4 prefix in its IPv4 form", ErrInvalid, name, p)
		case p != p.Masked():
			return fmt.Errorf("%w: %s.remote_prefixes: %s has host bits set (the network is %s)", ErrInvalid, name, p, p.Masked())
		case slices.Contains(m.RemotePrefixes[:i], p):
			return fmt.Errorf("%w: %s.remote_prefixes: %s twice", ErrInvalid, name, p)
		}
	}
	if m.Cgroup != "" {
		if dir != UL {
			return fmt.Errorf("%w: %s.cgroup: only the uplink matches a cgroup (the proxy does not see the CPE's sockets)", ErrInvalid, name)
		}
		if len(m.Cgroup) > maxCgroupLen || !cgroupRE.MatchString(m.Cgroup) || path.Clean(m.Cgroup) != m.Cgroup {
			return fmt.Errorf("%w: %s.cgroup %q: want a clean absolute cgroup v2 path (no . or .. or empty segment)", ErrInvalid, name, m.Cgroup)
		}
	}
	return nil
}

// checkInts checks a list key of integers: nil (absent) or 1..most
// distinct items in [0, hi].
func checkInts(name string, v []int, most, hi int) error {
	if v == nil {
		return nil
	}
	if len(v) == 0 || len(v) > most {
		return fmt.Errorf("%w: %s: %d items, want 1..%d", ErrInvalid, name, len(v), most)
	}
	for i, x := range v {
		if x < 0 || x > hi {
			return fmt.Errorf("%w: %s: %d outside [0, %d]", ErrInvalid, name, x, hi)
		}
		if slices.Contains(v[:i], x) {
			return fmt.Errorf("%w: %s: %d twice", ErrInvalid, name, x)
		}
	}
	return nil
}

// wireClass and wireMatch mirror a class's JSON object; pointers and nil
// slices tell a missing key from an empty one, number keeps integer
// checks exact.
type wireClass struct {
	Name    *string           `json:"name"`
	Match   *wireMatch        `json:"match"`
	Mode    *string           `json:"mode"`
	Reason  *string           `json:"reason"`
	Weights map[string]number `json:"weights"`
	Caps    map[string]number `json:"caps_mbps"`
	Urgent  *bool             `json:"urgent"`
}

type wireMatch struct {
	DSCP           []number   `json:"dscp"`
	Protocols      []number   `json:"protocols"`
	RemotePorts    [][]number `json:"remote_ports"`
	RemotePrefixes []string   `json:"remote_prefixes"`
	Cgroup         *string    `json:"cgroup"`
}

// parseClasses turns a direction's classes into Class values, checking
// what the JSON types carry (presence, integers, prefix syntax);
// ValidateClasses checks the rest. Absent or empty: nil.
func parseClasses(dir string, in []wireClass) ([]Class, error) {
	if len(in) > MaxClasses {
		return nil, fmt.Errorf("%w: %s.classes: %d classes, at most %d", ErrInvalid, dir, len(in), MaxClasses)
	}
	var out []Class
	for i, w := range in {
		name := fmt.Sprintf("%s.classes[%d]", dir, i)
		switch {
		case w.Name == nil:
			return nil, fmt.Errorf("%w: %s.name: missing", ErrInvalid, name)
		case w.Match == nil:
			return nil, fmt.Errorf("%w: %s.match: missing", ErrInvalid, name)
		case w.Mode == nil:
			return nil, fmt.Errorf("%w: %s.mode: missing", ErrInvalid, name)
		case w.Weights == nil:
			return nil, fmt.Errorf("%w: %s.weights: missing", ErrInvalid, name)
		}
		c := Class{Name: *w.Name, Mode: *w.Mode, Urgent: w.Urgent != nil && *w.Urgent}
		if w.Reason != nil {
			c.Reason = *w.Reason
		}
		var err error
		if c.Weights, err = parseWeightsMap(name, w.Weights); err != nil {
			return nil, err
		}
		if w.Caps != nil && len(w.Caps) == 0 {
			return nil, fmt.Errorf("%w: %s.caps_mbps: empty (omit the key instead)", ErrInvalid, name)
		}
		if c.CapsMbps, err = parseCaps(name+".caps_mbps", w.Caps); err != nil {
			return nil, err
		}
		if c.Match, err = parseMatch(name+".match", w.Match); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func parseMatch(name string, w *wireMatch) (Match, error) {
	var m Match
	var err error
	if m.DSCP, err = parseInts(name+".dscp", w.DSCP); err != nil {
		return Match{}, err
	}
	if m.Protocols, err = parseInts(name+".protocols", w.Protocols); err != nil {
		return Match{}, err
	}
	if w.RemotePorts != nil {
		m.RemotePorts = make([]PortRange, 0, len(w.RemotePorts))
		for _, r := range w.RemotePorts {
			if len(r) != 2 {
				return Match{}, fmt.Errorf("%w: %s.remote_ports: a range is [first, last], not %d numbers", ErrInvalid, name, len(r))
			}
			var pr PortRange
			for j, n := range r {
				v, err := n.Int64()
				if err != nil || v < 1 || v > 65535 {
					return Match{}, fmt.Errorf("%w: %s.remote_ports: %s is not a port 1..65535", ErrInvalid, name, n.String())
				}
				pr[j] = uint16(v)
			}
			m.RemotePorts = append(m.RemotePorts, pr)
		}
	}
	if w.RemotePrefixes != nil {
		m.RemotePrefixes = make([]netip.Prefix, 0, len(w.RemotePrefixes))
		for _, s := range w.RemotePrefixes {
			p, err := netip.ParsePrefix(s)
			if err != nil || len(s) > maxPrefixLen {
				return Match{}, fmt.Errorf("%w: %s.remote_prefixes: %q is not a prefix in CIDR form", ErrInvalid, name, s)
			}
			m.RemotePrefixes = append(m.RemotePrefixes, p)
		}
	}
	if w.Cgroup != nil {
		if *w.Cgroup == "" {
			return Match{}, fmt.Errorf("%w: %s.cgroup: empty", ErrInvalid, name)
		}
		m.Cgroup = *w.Cgroup
	}
	return m, nil
}

// parseInts reads a list of integers; nil stays nil (the key is absent).
func parseInts(name string, in []number) ([]int, error) {
	if in == nil {
		return nil, nil
	}
	out := make([]int, 0, len(in))
	for _, n := range in {
		v, err := n.Int64()
		if err != nil || v < 0 || v > 1<<16 {
			return nil, fmt.Errorf("%w: %s: %s is not a small non-negative integer", ErrInvalid, name, n.String())
		}
		out = append(out, int(v))
	}
	return out, nil
}
