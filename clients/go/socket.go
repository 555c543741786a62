package baton

import "os"

// DefaultSocket is where the sidecar's socket is in a pod that Baton's
// injector gave a sidecar.
const DefaultSocket = "/var/run/baton/baton.sock"

// SocketPath is the sidecar's socket as the baton command finds it:
// $BATON_SOCKET, else $BATON_SOCKET_PATH (its former name), else
// DefaultSocket.
func SocketPath() string {
	for _, name := range []string{"BATON_SOCKET", "BATON_SOCKET_PATH"} {
		if s := os.Getenv(name); s != "" {
			return s
		}
	}
	return DefaultSocket
}
