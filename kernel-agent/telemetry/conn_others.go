//go:build !linux

package telemetry

import (
	"fmt"
	"runtime"
)

// Conn is not implemented outside Linux.
type Conn struct{}

// Dial reports that sock_diag is a Linux feature.
func Dial() (*Conn, error) {
	return nil, fmt.Errorf("telemetry: sock_diag not implemented on %s/%s", runtime.GOOS, runtime.GOARCH)
}

// Close does nothing.
func (*Conn) Close() error { return nil }

// Subflows is not implemented.
func (*Conn) Subflows() ([]Subflow, error) { return nil, fmt.Errorf("telemetry: not implemented") }
