//go:build linux

package linkwatch

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Watcher follows a set of interfaces in the calling thread's network
// namespace.
type Watcher struct {
	ifaces []string
}

// New returns a Watcher for the named interfaces.
func New(ifaces []string) *Watcher { return &Watcher{ifaces: append([]string(nil), ifaces...)} }

// Start subscribes to link and address notifications, then reads the
// current state. It returns that initial state and a channel of status
// changes (only changes), which is closed when ctx ends or the netlink
// subscription fails (the error is sent on errc first).
func (w *Watcher) Start(ctx context.Context) (initial map[string]Status, updates <-chan Status, errc <-chan error, err error) {
	done := make(chan struct{})
	linkCh := make(chan netlink.LinkUpdate, 64)
	addrCh := make(chan netlink.AddrUpdate, 64)
	errs := make(chan error, 2)
	onErr := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	// Subscribe before listing so that no change between the two is lost.
	if err := netlink.LinkSubscribeWithOptions(linkCh, done, netlink.LinkSubscribeOptions{ErrorCallback: onErr}); err != nil {
		close(done)
		return nil, nil, nil, fmt.Errorf("linkwatch: subscribe links: %w", err)
	}
	if err := netlink.AddrSubscribeWithOptions(addrCh, done, netlink.AddrSubscribeOptions{ErrorCallback: onErr}); err != nil {
		close(done)
		return nil, nil, nil, fmt.Errorf("linkwatch: subscribe addresses: %w", err)
	}
	t := newTable(w.ifaces)
	for _, name := range w.ifaces {
		l, err := netlink.LinkByName(name)
		if err != nil {
			continue // absent for now; a later RTM_NEWLINK brings it
		}
		t.link(name, l.Attrs().Index, l.Attrs().RawFlags, false)
		addrs, err := netlink.AddrList(l, unix.AF_INET)
		if err != nil {
			close(done)
			return nil, nil, nil, fmt.Errorf("linkwatch: list addresses of %s: %w", name, err)
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				t.addr(l.Attrs().Index, ip.Unmap(), true)
			}
		}
	}
	initial = t.snapshot()
	out := make(chan Status, 16)
	outErr := make(chan error, 1)
	last := t.snapshot()
	go func() {
		defer close(out)
		defer close(done)
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
		for {
			select {
			case <-ctx.Done():
				return
			case err := <-errs:
				outErr <- fmt.Errorf("linkwatch: %w", err)
				return
			case u, ok := <-linkCh:
				if !ok {
					outErr <- fmt.Errorf("linkwatch: link subscription closed")
					return
				}
				emit(t.link(u.Attrs().Name, int(u.Index), u.Flags, u.Header.Type == unix.RTM_DELLINK))
			case u, ok := <-addrCh:
				if !ok {
					outErr <- fmt.Errorf("linkwatch: address subscription closed")
					return
				}
				if ip, ok := netip.AddrFromSlice(u.LinkAddress.IP); ok {
					emit(t.addr(u.LinkIndex, ip.Unmap(), u.NewAddr))
				}
			}
		}
	}()
	return initial, out, outErr, nil
}
