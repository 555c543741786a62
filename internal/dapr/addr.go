package dapr

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
)

// Default addresses, where daprd listens inside a pod: the SDKs' defaults.
const (
	DefaultHTTPAddr = "127.0.0.1:3500"
	DefaultGRPCAddr = "127.0.0.1:50001"
)

// ParseAddr reads a listen address: host:port for TCP, or unix:PATH (also
// unix://PATH, as gRPC writes it) for a unix socket, PATH absolute.
func ParseAddr(s string) (network, address string, err error) {
	if rest, ok := strings.CutPrefix(s, "unix:"); ok {
		path := strings.TrimPrefix(rest, "//")
		if !filepath.IsAbs(path) {
			return "", "", fmt.Errorf("%q: a unix socket's path must be absolute, e.g. unix:///var/run/baton/dapr-grpc.sock", s)
		}
		return "unix", path, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || port == "" {
		return "", "", fmt.Errorf("%q: want host:port such as %s, or unix:///PATH for a unix socket", s, DefaultHTTPAddr)
	}
	if host != "" && host != "localhost" && net.ParseIP(host) == nil {
		return "", "", fmt.Errorf("%q: the host must be an IP address or localhost", s)
	}
	return "tcp", s, nil
}
