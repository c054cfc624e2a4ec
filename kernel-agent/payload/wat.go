package payload

// WAT names a wireless access technology as it appears in payload keys.
type WAT = string

// The access technologies the channel knows, in canonical order.
const (
	NR   WAT = "nr"
	LTE  WAT = "lte"
	WiFi WAT = "wifi"
	LiFi WAT = "lifi"
)

// WATs returns the known access technologies in canonical order. It returns a
// fresh slice on every call so that callers cannot change the set.
func WATs() []WAT { return []WAT{NR, LTE, WiFi, LiFi} }

// KnownWAT reports whether name is one of WATs.
func KnownWAT(name string) bool {
	switch name {
	case NR, LTE, WiFi, LiFi:
		return true
	}
	return false
}

// MaxWeight is the largest weight the channel carries (one byte, the range of
// the WRR kernel's weights).
const MaxWeight = 255
