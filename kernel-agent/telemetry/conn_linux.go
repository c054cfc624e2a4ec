//go:build linux

package telemetry

import (
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Conn dumps TCP sockets through sock_diag in the calling thread's network
// namespace. It is safe for concurrent use.
type Conn struct {
	c *netlink.Conn
}

// Dial opens a NETLINK_SOCK_DIAG socket.
func Dial() (*Conn, error) {
	c, err := netlink.Dial(unix.NETLINK_SOCK_DIAG, nil)
	if err != nil {
		return nil, fmt.Errorf("sock_diag dial: %w", err)
	}
	return &Conn{c: c}, nil
}

// Close closes the socket.
func (c *Conn) Close() error { return c.c.Close() }

// Subflows returns every established IPv4 TCP socket with its tcp_info.
func (c *Conn) Subflows() ([]Subflow, error) {
	msgs, err := c.c.Execute(netlink.Message{
		Header: netlink.Header{Type: sockDiagByFamily, Flags: netlink.Request | netlink.Dump},
		Data:   request(),
	})
	if err != nil {
		return nil, fmt.Errorf("sock_diag dump: %w", err)
	}
	out := make([]Subflow, 0, len(msgs))
	for _, m := range msgs {
		s, err := parseMessage(m.Data)
		if err != nil {
			return nil, fmt.Errorf("sock_diag dump: %w", err)
		}
		out = append(out, s)
	}
	return out, nil
}
