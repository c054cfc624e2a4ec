//go:build linux

// Package nstest runs test code inside fresh network namespaces, and skips
// tests with a clear reason where namespaces cannot be made (not root, no
// CAP_SYS_ADMIN, a container without unshare).
package nstest

import (
	"io"
	"net"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// Do runs fn on a thread inside a new, empty network namespace and
// returns when fn returns. Sockets fn opens stay in that namespace. The
// namespace disappears when its last socket and thread are gone.
func Do(t testing.TB, fn func(ns netns.NsHandle)) {
	t.Helper()
	done := make(chan struct{})
	var skip string
	go func() {
		defer close(done)
		// The thread is locked and never unlocked on error paths: the
		// runtime then ends it instead of reusing a thread in a foreign
		// namespace.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			skip = "cannot read the current network namespace: " + err.Error()
			return
		}
		defer orig.Close()
		ns, err := netns.New()
		if err != nil {
			skip = "cannot create a network namespace (needs root/CAP_SYS_ADMIN): " + err.Error()
			return
		}
		defer ns.Close()
		fn(ns)
		if err := netns.Set(orig); err == nil {
			runtime.UnlockOSThread()
		}
	}()
	<-done
	if skip != "" {
		t.Skip(skip)
	}
}

// In runs fn on a thread switched into ns, then switches back.
func In(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// ServeDiscard accepts connections on ln until ln is closed and reads each
// one to its end: the receiving side of a bulk transfer in a test. It
// returns when Accept fails, so run it in its own goroutine.
func ServeDiscard(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			_, _ = io.Copy(io.Discard, c)
			_ = c.Close()
		}()
	}
}
