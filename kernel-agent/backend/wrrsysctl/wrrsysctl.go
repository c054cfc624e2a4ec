// Package wrrsysctl is the backend for the 5G-CLARITY WRR kernel (Linux
// 5.4/5.5 with MPTCP v0.96 and WRR v0.5): it selects the roundrobin
// scheduler, sets cwnd_limited, and writes one weight rule per WAT into
// net.mptcp.mptcp_wrr_li_weights, then reads every file back to verify.
//
// The WRR patch's source is not public, so the writer stays small and
// trusts only what it reads back. The rules are global: the agent must run
// in the initial network namespace for this backend.
package wrrsysctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// Files relative to the roots.
const (
	schedulerFile   = "net/mptcp/mptcp_scheduler"
	weightsFile     = "net/mptcp/mptcp_wrr_li_weights"
	cwndLimitedFile = "module/mptcp_rr/parameters/cwnd_limited"
)

// Config configures a Backend. The zero value is not valid: see New.
type Config struct {
	// ProcSysRoot is the sysctl tree; "" means /proc/sys. Tests point it
	// at a temporary directory.
	ProcSysRoot string
	// SysRoot is the sysfs tree; "" means /sys.
	SysRoot string
	// Scheduler is written to net.mptcp.mptcp_scheduler; "" means
	// "roundrobin".
	Scheduler string
	// CwndLimited is written to mptcp_rr's cwnd_limited parameter: "N" (or
	// "0"/"false") gives true WRR, the mode the weights assume; "" means "N".
	CwndLimited string
}

// Backend writes WRR weights through sysctl files. It is not safe for
// concurrent use; the agent calls it from one goroutine.
type Backend struct {
	weightsPath string
	schedPath   string
	cwndPath    string
	scheduler   string
	cwndLimited string
	prepared    bool
}

// New returns a Backend for cfg. It does not touch the kernel: the first
// Apply selects the scheduler and cwnd_limited.
func New(cfg Config) (*Backend, error) {
	if cfg.ProcSysRoot == "" {
		cfg.ProcSysRoot = "/proc/sys"
	}
	if cfg.SysRoot == "" {
		cfg.SysRoot = "/sys"
	}
	if cfg.Scheduler == "" {
		cfg.Scheduler = "roundrobin"
	}
	if cfg.CwndLimited == "" {
		cfg.CwndLimited = "N"
	}
	if strings.ContainsAny(cfg.Scheduler, " \n\t") {
		return nil, fmt.Errorf("wrr-sysctl: scheduler %q contains whitespace", cfg.Scheduler)
	}
	return &Backend{
		weightsPath: filepath.Join(cfg.ProcSysRoot, weightsFile),
		schedPath:   filepath.Join(cfg.ProcSysRoot, schedulerFile),
		cwndPath:    filepath.Join(cfg.SysRoot, cwndLimitedFile),
		scheduler:   cfg.Scheduler,
		cwndLimited: cfg.CwndLimited,
	}, nil
}

// Name implements backend.Local.
func (*Backend) Name() string { return payload.BackendWRRSysctl }

// Capabilities implements backend.Local: one byte per weight.
func (*Backend) Capabilities() payload.Capabilities {
	return payload.Capabilities{MaxWeight: payload.MaxWeight, Semantics: payload.SemanticsWRR}
}

// Close implements backend.Local.
func (*Backend) Close() error { return nil }

// Apply writes one tuple per path with an IPv4 address (source = that
// address, destination and ports wildcards) and verifies the read-back.
func (b *Backend) Apply(_ context.Context, paths []backend.Path) error {
	if err := b.prepare(); err != nil {
		return err
	}
	tuples := make([]Tuple, 0, len(paths))
	for _, p := range paths {
		if !p.Addr.IsValid() {
			continue
		}
		tuples = append(tuples, Tuple{Src: p.Addr, Weight: p.Weight})
	}
	text, err := Format(tuples)
	if err != nil {
		return fmt.Errorf("wrr-sysctl: %w", err)
	}
	if err := writeVerify(b.weightsPath, text, sameTuples); err != nil {
		return fmt.Errorf("wrr-sysctl: weights: %w", err)
	}
	return nil
}

// prepare selects the scheduler and cwnd_limited once.
func (b *Backend) prepare() error {
	if b.prepared {
		return nil
	}
	if err := ensure(b.schedPath, b.scheduler, sameWord); err != nil {
		return fmt.Errorf("wrr-sysctl: scheduler: %w", err)
	}
	if err := ensure(b.cwndPath, b.cwndLimited, sameBool); err != nil {
		return fmt.Errorf("wrr-sysctl: cwnd_limited: %w", err)
	}
	b.prepared = true
	return nil
}

// ensure writes text only when the file does not already hold it: the
// cwnd_limited sysfs file is root-owned, so under the systemd unit (a
// non-root user with CAP_NET_ADMIN) a privileged ExecStartPre sets it and
// the agent only verifies.
func ensure(path, text string, same func(want, got string) bool) error {
	if got, err := readBounded(path); err == nil && same(text, string(got)) {
		return nil
	}
	return writeVerify(path, text, same)
}

// writeVerify writes text to an existing file (never creating one: a missing
// sysctl means the kernel lacks the feature) and checks the read-back.
func writeVerify(path, text string, same func(want, got string) bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	got, err := readBounded(path)
	if err != nil {
		return err
	}
	if !same(text, string(got)) {
		return fmt.Errorf("read back %q, wrote %q", strings.TrimSpace(string(got)), text)
	}
	return nil
}

// readBounded reads a sysctl or sysfs file of at most MaxTextBytes.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxTextBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxTextBytes {
		return nil, fmt.Errorf("%s: more than %d bytes", path, MaxTextBytes)
	}
	return b, nil
}

func sameWord(want, got string) bool { return strings.TrimSpace(got) == want }

// sameBool compares module parameters, which the kernel prints as Y/N
// whatever was written (0/1, y/n, true/false).
func sameBool(want, got string) bool {
	w, err1 := parseBool(want)
	g, err2 := parseBool(strings.TrimSpace(got))
	if err1 != nil || err2 != nil {
		return sameWord(want, got)
	}
	return w == g
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "y", "yes", "on":
		return true, nil
	case "n", "no", "off":
		return false, nil
	}
	return strconv.ParseBool(s)
}

// sameTuples compares the rule lists field by field, so that whitespace the
// kernel adds or normalises does not count as a mismatch.
func sameTuples(want, got string) bool {
	w, err1 := Parse(want)
	g, err2 := Parse(got)
	if err1 != nil || err2 != nil || len(w) != len(g) {
		return false
	}
	for i := range w {
		if w[i] != g[i] {
			return false
		}
	}
	return true
}
