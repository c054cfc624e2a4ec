package mptcpupstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcw-xapp/kernel-agent/backend"
	"github.com/mcw-xapp/kernel-agent/mptcppm"
	"github.com/mcw-xapp/kernel-agent/payload"
)

// DownlinkPM is what the Downlink needs from the kernel: the subflows with
// both ends' backup flags (sock_diag) and the per-subflow flag command.
type DownlinkPM interface {
	Subflows() ([]mptcppm.Subflow, error)
	SetSubflowBackup(token uint32, local, remote netip.AddrPort, backup bool) error
}

// EventSource is the path manager's event stream (an *mptcppm.Monitor).
type EventSource interface {
	SetReadDeadline(time.Time) error
	Receive() ([]mptcppm.Event, error)
}

// DownlinkConfig configures a Downlink.
type DownlinkConfig struct {
	// PM lists subflows and flags them. Required.
	PM DownlinkPM
	// Events delivers new connections and subflows to Watch. Required: on
	// the userspace path manager an open event listener is also what makes
	// the kernel accept MP_JOINs.
	Events EventSource
	// Closers are closed by Close (the sockets behind PM and Events).
	Closers []func() error
	// Logger receives one line per subflow the watcher could not flag;
	// nil discards.
	Logger *slog.Logger
}

// Downlink steers the downlink of the CPEs a proxy serves on mainline
// Linux: a WAT at weight 0 gets the backup flag, set by the proxy on every
// subflow whose remote address is that WAT's CPE address, on running
// connections (ApplyAll) and on new ones (Watch). It is safe for one
// ApplyAll caller and one Watch goroutine at a time.
type Downlink struct {
	pm      DownlinkPM
	events  EventSource
	closers []func() error
	log     *slog.Logger

	mu sync.Mutex
	// want: remote address -> backup wanted; owner: remote address -> CPE.
	want  map[netip.Addr]bool
	owner map[netip.Addr]string
	// flagged are addresses whose subflows this Downlink may have flagged:
	// when their CPE is no longer served the flag is cleared.
	flagged map[netip.Addr]bool
}

var _ backend.Backend = (*Downlink)(nil)

// NewDownlink returns a Downlink; it does not touch the kernel.
func NewDownlink(cfg DownlinkConfig) (*Downlink, error) {
	if cfg.PM == nil || cfg.Events == nil {
		return nil, errors.New("mptcp-upstream downlink: PM and Events are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Downlink{
		pm: cfg.PM, events: cfg.Events, closers: cfg.Closers, log: log,
		want: map[netip.Addr]bool{}, owner: map[netip.Addr]string{}, flagged: map[netip.Addr]bool{},
	}, nil
}

// Name implements backend.Backend.
func (*Downlink) Name() string { return payload.BackendMPTCPUpstream }

// Capabilities implements backend.Backend: on/off per WAT, and coupled to
// the uplink (the default scheduler treats a subflow as backup when either
// end flagged it, and the flag is signalled to the peer with MP_PRIO).
func (*Downlink) Capabilities() payload.Capabilities {
	return payload.Capabilities{MaxWeight: 1, OnOffOnly: true, DirectionsCoupled: true, Semantics: payload.SemanticsOnOff}
}

// Close closes the sockets handed in the config; afterwards the userspace
// path manager refuses new MP_JOINs.
func (d *Downlink) Close() error {
	var errs []error
	for _, c := range d.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// ApplyAll implements backend.Backend. A CPE reporting an address another
// served CPE (earlier by id) already reported cannot be told apart from it
// and is returned as not applied; so is a CPE one of whose subflows does
// not read back as requested. Subflows of CPEs no longer served get their
// flag cleared.
func (d *Downlink) ApplyAll(ctx context.Context, cpes []backend.Device) (map[string]error, error) {
	notApplied := map[string]error{}
	want := map[netip.Addr]bool{}
	owner := map[netip.Addr]string{}
	sorted := slices.SortedFunc(slices.Values(cpes), func(a, b backend.Device) int { return cmp.Compare(a.CPEID, b.CPEID) })
	for _, c := range sorted {
		var clash error
		for _, p := range c.Paths {
			if other, ok := owner[p.Addr.Unmap()]; ok && p.Addr.IsValid() {
				clash = fmt.Errorf("%s address %s is also %s's", p.WAT, p.Addr, other)
				break
			}
		}
		if clash != nil {
			notApplied[c.CPEID] = clash
			continue
		}
		for _, p := range c.Paths {
			if !p.Addr.IsValid() {
				// No address reported: the CPE has no subflow on that WAT.
				continue
			}
			want[p.Addr.Unmap()] = p.Weight == 0
			owner[p.Addr.Unmap()] = c.CPEID
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.want, d.owner = want, owner
	for a := range want {
		d.flagged[a] = true
	}
	failed, err := d.reconcile()
	if err != nil {
		return nil, fmt.Errorf("mptcp-upstream downlink: %w", err)
	}
	for cpe, err := range failed {
		notApplied[cpe] = err
	}
	return notApplied, nil
}

// reconcile flags every subflow as wanted, then lists them again to
// verify. It returns per CPE the first subflow that does not read back as
// requested. Called with mu held.
func (d *Downlink) reconcile() (map[string]error, error) {
	sfs, err := d.pm.Subflows()
	if err != nil {
		return nil, err
	}
	setErr := map[netip.AddrPort]error{}
	changed := false
	for _, s := range sfs {
		a := s.Remote.Addr()
		want, served := d.want[a]
		if !served && !d.flagged[a] {
			continue
		}
		if has := s.Flags&mptcppm.SubflowBackupLocal != 0; has != want {
			changed = true
			if err := d.pm.SetSubflowBackup(s.Token, s.Local, s.Remote, want); err != nil {
				setErr[s.Remote] = err
			}
		}
	}
	if !changed {
		d.forgetCleared(sfs)
		return nil, nil
	}
	if sfs, err = d.pm.Subflows(); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	failed := map[string]error{}
	for _, s := range sfs {
		a := s.Remote.Addr()
		want, served := d.want[a]
		if !served {
			continue
		}
		if has := s.Flags&mptcppm.SubflowBackupLocal != 0; has != want {
			cpe := d.owner[a]
			if _, dup := failed[cpe]; dup {
				continue
			}
			why := fmt.Errorf("subflow %s->%s (token %08x) reads back flags %q, want backup %t", s.Local, s.Remote, s.Token, s.Flags, want)
			if err := setErr[s.Remote]; err != nil {
				why = fmt.Errorf("%w: %w", why, err)
			}
			failed[cpe] = why
		}
	}
	d.forgetCleared(sfs)
	return failed, nil
}

// forgetCleared drops unserved addresses none of whose subflows carries
// the flag any more, so a later CPE with that address starts clean.
func (d *Downlink) forgetCleared(sfs []mptcppm.Subflow) {
	still := map[netip.Addr]bool{}
	for _, s := range sfs {
		if s.Flags&mptcppm.SubflowBackupLocal != 0 {
			still[s.Remote.Addr()] = true
		}
	}
	for a := range d.flagged {
		if _, served := d.want[a]; !served && !still[a] {
			delete(d.flagged, a)
		}
	}
}

// watchPoll is how long Watch waits for events before it checks its
// context and beats.
const watchPoll = 500 * time.Millisecond

// Watch flags the subflows of new connections and joins as they are
// established, until ctx ends. It reconciles everything first (subflows
// may have been established before it listened) and again after the event
// stream lost messages. It returns an error only when the event socket
// fails for good; the agent's supervisor then restarts the process.
func (d *Downlink) Watch(ctx context.Context, beat func()) error {
	d.mu.Lock()
	_, err := d.reconcile()
	d.mu.Unlock()
	if err != nil {
		d.log.Warn("downlink reconcile", "err", err)
	}
	for {
		beat()
		if ctx.Err() != nil {
			return nil
		}
		if err := d.events.SetReadDeadline(time.Now().Add(watchPoll)); err != nil {
			return fmt.Errorf("mptcp-upstream downlink: events: %w", err)
		}
		evs, err := d.events.Receive()
		d.onEvents(evs)
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
		case isOverrun(err):
			// The kernel dropped events (socket buffer full): some new
			// subflows may not have been seen.
			d.mu.Lock()
			_, err = d.reconcile()
			d.mu.Unlock()
			if err != nil {
				d.log.Warn("downlink reconcile after overrun", "err", err)
			}
		case ctx.Err() != nil:
			return nil
		default:
			return fmt.Errorf("mptcp-upstream downlink: events: %w", err)
		}
	}
}

// onEvents flags new subflows whose remote address wants backup. A fresh
// subflow starts without the local flag, so only backup needs setting.
func (d *Downlink) onEvents(evs []mptcppm.Event) {
	if len(evs) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ev := range evs {
		if ev.Type != mptcppm.EventEstablished && ev.Type != mptcppm.EventSubEstablished {
			continue
		}
		if !d.want[ev.Remote.Addr()] {
			continue
		}
		if err := d.pm.SetSubflowBackup(ev.Token, ev.Local, ev.Remote, true); err != nil {
			d.log.Warn("downlink: cannot flag new subflow backup", "cpe", d.owner[ev.Remote.Addr()],
				"local", ev.Local, "remote", ev.Remote, "token", fmt.Sprintf("%08x", ev.Token), "err", err)
		}
	}
}

// isOverrun tells a multicast overrun (the kernel dropped events for a
// full receive buffer) from a broken socket.
func isOverrun(err error) bool { return errors.Is(err, syscall.ENOBUFS) }

// Path-manager sysctls: path_manager (Linux 6.15+) names it, pm_type (older)
// numbers it.
const (
	pathManagerFile = "net/mptcp/path_manager"
	pmTypeFile      = "net/mptcp/pm_type"
)

// EnsureUserspacePM selects the userspace path manager in the namespace of
// procSysRoot ("" means /proc/sys) and reads it back. Only connections
// created afterwards use it. With it the kernel creates no subflows and
// announces nothing for this host, and accepts a peer's MP_JOIN only while
// an event listener is open (a Downlink's Events): the proxy is the passive
// end, the CPEs' in-kernel path managers open the subflows.
func EnsureUserspacePM(procSysRoot string) error {
	if procSysRoot == "" {
		procSysRoot = "/proc/sys"
	}
	path, value := filepath.Join(procSysRoot, pathManagerFile), "userspace"
	if _, err := os.Stat(path); err != nil {
		path, value = filepath.Join(procSysRoot, pmTypeFile), "1"
	}
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == value {
		return nil
	}
	if err := os.WriteFile(path, []byte(value+"\n"), 0); err != nil {
		return fmt.Errorf("mptcp-upstream downlink: select userspace path manager: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("mptcp-upstream downlink: read %s: %w", path, err)
	}
	if got := strings.TrimSpace(string(b)); got != value {
		return fmt.Errorf("mptcp-upstream downlink: %s reads %q after writing %q", path, got, value)
	}
	return nil
}

// kernelPM joins the two sockets a Downlink reads and writes through.
type kernelPM struct {
	pm   *mptcppm.Conn
	diag *mptcppm.Diag
}

func (k kernelPM) Subflows() ([]mptcppm.Subflow, error) { return k.diag.Subflows() }

func (k kernelPM) SetSubflowBackup(token uint32, local, remote netip.AddrPort, backup bool) error {
	return k.pm.SetSubflowBackup(token, local, remote, backup)
}

// DialDownlink opens the path-manager, sock_diag and event sockets in the
// calling thread's network namespace (the proxy's) and returns a Downlink
// over them. The namespace must run the userspace path manager (see
// EnsureUserspacePM); the event listener is open from here on.
func DialDownlink(log *slog.Logger) (*Downlink, error) {
	pm, err := mptcppm.Dial()
	if err != nil {
		return nil, fmt.Errorf("mptcp-upstream downlink: %w", err)
	}
	diag, err := mptcppm.DialDiag()
	if err != nil {
		pm.Close()
		return nil, fmt.Errorf("mptcp-upstream downlink: %w", err)
	}
	mon, err := mptcppm.DialMonitor()
	if err != nil {
		pm.Close()
		diag.Close()
		return nil, fmt.Errorf("mptcp-upstream downlink: %w", err)
	}
	return NewDownlink(DownlinkConfig{
		PM: kernelPM{pm: pm, diag: diag}, Events: mon,
		Closers: []func() error{mon.Close, diag.Close, pm.Close}, Logger: log,
	})
}
