//go:build !linux

package mptcppm

import (
	"fmt"
	"runtime"
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
