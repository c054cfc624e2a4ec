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
	table   *table
	linkCh  chan netlink.LinkUpdate
	addrCh  chan netlink.AddrUpdate
	routeCh chan netlink.RouteUpdate
	// routes lists routes in Start's namespace, whichever thread Run is on.
	routes    *netlink.Handle
	errs      chan error
	done      chan struct{}
	closeOnce sync.Once
}

// New returns a Watcher for the named interfaces.
func New(ifaces []string) *Watcher { return &Watcher{ifaces: append([]string(nil), ifaces...)} }

// Start subscribes to link, address and route notifications, then reads the
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
	w.routeCh = make(chan netlink.RouteUpdate, 64)
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
	if err := netlink.RouteSubscribeWithOptions(w.routeCh, w.done, netlink.RouteSubscribeOptions{ErrorCallback: onErr}); err != nil {
		w.close()
		return nil, fmt.Errorf("linkwatch: subscribe routes: %w", err)
	}
	// Run closes it; so does a failing Start.
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		w.close()
		return nil, fmt.Errorf("linkwatch: route handle: %w", err)
	}
	w.routes = h
	w.table = newTable(w.ifaces)
	for _, name := range w.ifaces {
		l, err := netlink.LinkByName(name)
		if err != nil {
			continue // absent for now; a later RTM_NEWLINK brings it
		}
		w.table.link(name, l.Attrs().Index, l.Attrs().RawFlags, false, time.Now())
		gw, err := hasGatewayRoute(w.routes, l.Attrs().Index)
		if err != nil {
			w.close()
			w.routes.Close()
			return nil, fmt.Errorf("linkwatch: list routes of %s: %w", name, err)
		}
		w.table.routes(l.Attrs().Index, gw)
		addrs, err := netlink.AddrList(l, unix.AF_INET)
		if err != nil {
			w.close()
			w.routes.Close()
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
	defer w.routes.Close()
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
	// relist reads the routes through a watched interface again: after
	// its link came up, and when a route through it changed.
	relist := func(index int) error {
		if !w.table.watched(index) {
			return nil
		}
		gw, err := hasGatewayRoute(w.routes, index)
		if err != nil {
			return fmt.Errorf("linkwatch: list routes: %w", err)
		}
		emit(w.table.routes(index, gw))
		return nil
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	grace := time.NewTimer(time.Hour)
	defer grace.Stop()
	for {
		beat()
		if next := w.table.nextExpiry(); !next.IsZero() {
			grace.Reset(time.Until(next))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case now := <-grace.C:
			for _, s := range w.table.expire(now) {
				emit(s, true)
			}
		case err := <-w.errs:
			return fmt.Errorf("linkwatch: %w", err)
		case u, ok := <-w.linkCh:
			if !ok {
				return errors.New("linkwatch: link subscription closed")
			}
			s, watched := w.table.link(u.Attrs().Name, int(u.Index), u.Flags, u.Header.Type == unix.RTM_DELLINK, time.Now())
			emit(s, watched)
			if watched && s.AwaitingRoute {
				// The route may be back already (a carrier lost with the
				// link administratively up keeps it).
				if err := relist(s.Index); err != nil {
					return err
				}
			}
		case u, ok := <-w.routeCh:
			if !ok {
				return errors.New("linkwatch: route subscription closed")
			}
			for _, index := range routeLinks(u.Route) {
				if err := relist(index); err != nil {
					return err
				}
			}
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

// routeLinks returns the interfaces a route goes through.
func routeLinks(r netlink.Route) []int {
	out := []int{}
	if r.LinkIndex > 0 {
		out = append(out, r.LinkIndex)
	}
	for _, nh := range r.MultiPath {
		if nh != nil && nh.LinkIndex > 0 {
			out = append(out, nh.LinkIndex)
		}
	}
	return out
}

// hasGatewayRoute reports whether a gateway route in any IPv4 table goes
// through interface index.
func hasGatewayRoute(h *netlink.Handle, index int) (bool, error) {
	rs, err := h.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return false, err
	}
	for _, r := range rs {
		if r.Gw != nil && r.LinkIndex == index {
			return true, nil
		}
		for _, nh := range r.MultiPath {
			if nh != nil && nh.Gw != nil && nh.LinkIndex == index {
				return true, nil
			}
		}
	}
	return false, nil
}
