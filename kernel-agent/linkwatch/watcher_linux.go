//go:build linux

package linkwatch

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Watcher follows a set of interfaces in the calling thread's network
// namespace. Call Start, then Run once.
type Watcher struct {
	ifaces []string

	// Set by Start, used by Run.
	table     *table
	linkCh    chan netlink.LinkUpdate
	addrCh    chan netlink.AddrUpdate
	errs      chan error
	done      chan struct{}
	closeOnce sync.Once
}

// New returns a Watcher for the named interfaces.
func New(ifaces []string) *Watcher { return &Watcher{ifaces: append([]string(nil), ifaces...)} }

// Start subscribes to link and address notifications, then reads the
// current state, which it returns. The subscription ends when ctx ends or
// Run returns.
func (w *Watcher) Start(ctx context.Context) (map[string]Status, error) {
	if w.done != nil {
		return nil, errors.New("linkwatch: Start called twice")
	}
	w.done = make(chan struct{})
	context.AfterFunc(ctx, w.close)
	w.linkCh = make(chan netlink.LinkUpdate, 64)
	w.addrCh = make(chan netlink.AddrUpdate, 64)
	w.errs = make(chan error, 2)
	onErr := func(err error) {
		select {
		case w.errs <- err:
		default:
		}
	}
	// Subscribe before listing so that no change between the two is lost.
	if err := netlink.LinkSubscribeWithOptions(w.linkCh, w.done, netlink.LinkSubscribeOptions{ErrorCallback: onErr}); err != nil {
		w.close()
		return nil, fmt.Errorf("linkwatch: subscribe links: %w", err)
	}
	if err := netlink.AddrSubscribeWithOptions(w.addrCh, w.done, netlink.AddrSubscribeOptions{ErrorCallback: onErr}); err != nil {
		w.close()
		return nil, fmt.Errorf("linkwatch: subscribe addresses: %w", err)
	}
	w.table = newTable(w.ifaces)
	for _, name := range w.ifaces {
		l, err := netlink.LinkByName(name)
		if err != nil {
			continue // absent for now; a later RTM_NEWLINK brings it
		}
		w.table.link(name, l.Attrs().Index, l.Attrs().RawFlags, false)
		addrs, err := netlink.AddrList(l, unix.AF_INET)
		if err != nil {
			w.close()
			return nil, fmt.Errorf("linkwatch: list addresses of %s: %w", name, err)
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				w.table.addr(l.Attrs().Index, ip.Unmap(), true)
			}
		}
	}
	return w.table.snapshot(), nil
}

func (w *Watcher) close() { w.closeOnce.Do(func() { close(w.done) }) }

// Run sends every status change after Start on out (only changes) until
// ctx ends, when it returns nil, or the netlink subscription fails or
// closes, when it returns the error. It calls beat every second and after
// each notification.
func (w *Watcher) Run(ctx context.Context, out chan<- Status, beat func()) error {
	if w.table == nil {
		return errors.New("linkwatch: Run before Start")
	}
	defer w.close()
	last := w.table.snapshot()
	emit := func(s Status, ok bool) {
		if !ok || last[s.Interface] == s {
			return
		}
		last[s.Interface] = s
		select {
		case out <- s:
		case <-ctx.Done():
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		beat()
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case err := <-w.errs:
			return fmt.Errorf("linkwatch: %w", err)
		case u, ok := <-w.linkCh:
			if !ok {
				return errors.New("linkwatch: link subscription closed")
			}
			emit(w.table.link(u.Attrs().Name, int(u.Index), u.Flags, u.Header.Type == unix.RTM_DELLINK))
		case u, ok := <-w.addrCh:
			if !ok {
				return errors.New("linkwatch: address subscription closed")
			}
			if ip, ok := netip.AddrFromSlice(u.LinkAddress.IP); ok {
				emit(w.table.addr(u.LinkIndex, ip.Unmap(), u.NewAddr))
			}
		}
	}
}
