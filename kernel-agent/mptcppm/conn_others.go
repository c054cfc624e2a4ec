//go:build !linux

package mptcppm

import (
	"fmt"
	"net/netip"
	"runtime"
	"time"
)

// Conn is not implemented outside Linux.
type Conn struct{}

func notImplemented() error {
	return fmt.Errorf("mptcppm: not implemented on %s/%s", runtime.GOOS, runtime.GOARCH)
}

// Dial reports that MPTCP endpoints are a Linux feature.
func Dial() (*Conn, error) { return nil, notImplemented() }

// Close does nothing.
func (*Conn) Close() error { return nil }

// Endpoints is not implemented.
func (*Conn) Endpoints() ([]Endpoint, error) { return nil, notImplemented() }

// Add is not implemented.
func (*Conn) Add(Endpoint) error { return notImplemented() }

// Delete is not implemented.
func (*Conn) Delete(Endpoint) error { return notImplemented() }

// SetFlags is not implemented.
func (*Conn) SetFlags(Endpoint) error { return notImplemented() }

// SetLimits is not implemented.
func (*Conn) SetLimits(Limits) error { return notImplemented() }

// Limits is not implemented.
func (*Conn) Limits() (Limits, error) { return Limits{}, notImplemented() }

// SetSubflowBackup is not implemented.
func (*Conn) SetSubflowBackup(uint32, netip.AddrPort, netip.AddrPort, bool) error {
	return notImplemented()
}

// Monitor is not implemented outside Linux.
type Monitor struct{}

// DialMonitor reports that MPTCP events are a Linux feature.
func DialMonitor() (*Monitor, error) { return nil, notImplemented() }

// SetReadDeadline does nothing.
func (*Monitor) SetReadDeadline(time.Time) error { return nil }

// Receive is not implemented.
func (*Monitor) Receive() ([]Event, error) { return nil, notImplemented() }

// Close does nothing.
func (*Monitor) Close() error { return nil }

// Diag is not implemented outside Linux.
type Diag struct{}

// DialDiag reports that sock_diag is a Linux feature.
func DialDiag() (*Diag, error) { return nil, notImplemented() }

// Close does nothing.
func (*Diag) Close() error { return nil }

// Subflows is not implemented.
func (*Diag) Subflows() ([]Subflow, error) { return nil, notImplemented() }
