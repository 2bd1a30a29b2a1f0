//go:build !linux

package remote

import "net"

// QuickAck returns c: only Linux lets a socket turn delayed ACKs off.
func QuickAck(c net.Conn) net.Conn { return c }
