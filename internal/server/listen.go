package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// SocketMode is the permission of the socket file: the app container and
// the sidecar share a group, nobody else may connect.
const SocketMode = 0o660

// ListenUnix listens on a unix socket at path with mode SocketMode. A
// socket file left by a dead process is replaced; one that a live process
// still serves is not stolen, and a path that is not a socket is refused,
// as is one whose directory does not exist (a mistyped path must not
// quietly make directories). The file is removed when the listener closes.
func ListenUnix(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("socket directory %s does not exist: create it, or choose another socket path", dir)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("socket path %s exists and is not a socket; remove it or choose another socket path", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("socket path %s is served by a running process; stop it or choose another socket path", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("socket path %s: cannot tell whether its server is alive: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, SocketMode); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return l, nil
}
