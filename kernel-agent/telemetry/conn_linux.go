//go:build linux

package telemetry

import (
	"errors"
	"fmt"
	"time"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Conn dumps TCP sockets through sock_diag in the network namespace it was
// dialled in. It is safe for concurrent use (dumps on the socket are
// serialised).
type Conn struct {
	sh *nl.SocketHandle
}

// dumpTimeout bounds one dump: the kernel answers at once; a socket that
// stays silent is not waited on for ever.
const dumpTimeout = 10 * time.Second

// Dial opens a NETLINK_SOCK_DIAG socket in the calling thread's network
// namespace.
func Dial() (*Conn, error) {
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sock_diag dial: %w", err)
	}
	tv := unix.NsecToTimeval(dumpTimeout.Nanoseconds())
	if err := errors.Join(s.SetSendTimeout(&tv), s.SetReceiveTimeout(&tv)); err != nil {
		s.Close()
		return nil, fmt.Errorf("sock_diag dial: %w", err)
	}
	return &Conn{sh: &nl.SocketHandle{Socket: s}}, nil
}

// Close closes the socket.
func (c *Conn) Close() error { c.sh.Close(); return nil }

// Subflows returns every established IPv4 TCP socket with its tcp_info.
func (c *Conn) Subflows() ([]Subflow, error) {
	req := nl.NewNetlinkRequest(sockDiagByFamily, unix.NLM_F_DUMP)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_SOCK_DIAG: c.sh}
	req.AddRawData(request())
	msgs, err := req.Execute(unix.NETLINK_SOCK_DIAG, 0)
	if err != nil {
		return nil, fmt.Errorf("sock_diag dump: %w", err)
	}
	out := make([]Subflow, 0, len(msgs))
	for _, m := range msgs {
		s, err := parseMessage(m)
		if err != nil {
			return nil, fmt.Errorf("sock_diag dump: %w", err)
		}
		out = append(out, s)
	}
	return out, nil
}
