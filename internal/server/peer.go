package server

import (
	"context"
	"net"

	"golang.org/x/sys/unix"
)

// Peer is the process on the other end of a unix socket connection, as the
// kernel reports it (SO_PEERCRED): who asked, for the log of a force release.
type Peer struct {
	PID      int32
	UID, GID uint32
}

type peerKey struct{}

// withPeer records the peer of a unix connection in its context.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	if err := raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cred == nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, Peer{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid})
}

func peerOf(ctx context.Context) (Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(Peer)
	return p, ok
}
