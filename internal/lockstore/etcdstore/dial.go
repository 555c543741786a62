package etcdstore

import "google.golang.org/grpc"

// The flow-control windows of the etcd client's connection. gRPC sizes
// them by default from a bandwidth estimate that pings the server each
// time data arrives: on the lock engine's traffic, a small request and a
// small answer at a time, that is a PING and a WINDOW_UPDATE per request,
// about one write in six on the connection and as many wake-ups. Fixed
// windows send neither, and are wide enough for the largest reads (a list
// of every lock of a scope) at local round-trip times: 1 MiB per stream is
// about 1 GB/s at a round trip of 1 ms.
const (
	streamWindow = 1 << 20
	connWindow   = 4 << 20
)

// DialOptions returns the gRPC options of an etcd client for the lock
// engine: fixed flow-control windows (streamWindow, connWindow).
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(streamWindow), grpc.WithStaticConnWindowSize(connWindow)}
}
