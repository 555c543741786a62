package dapr

import (
	"context"

	runtimev1pb "github.com/dapr/dapr/pkg/proto/runtime/v1"
	"google.golang.org/grpc"
)

// served are the methods of Dapr's gRPC service that Baton answers; every
// other one (and every other service) is Unimplemented, saying so.
var served = map[string]bool{
	runtimev1pb.Dapr_TryLockAlpha1_FullMethodName: true,
	runtimev1pb.Dapr_UnlockAlpha1_FullMethodName:  true,
	runtimev1pb.Dapr_GetMetadata_FullMethodName:   true,
}

// service is dapr.proto.runtime.v1.Dapr, lock calls only.
type service struct {
	runtimev1pb.UnimplementedDaprServer
	api *API
}

func (s service) TryLockAlpha1(ctx context.Context, req *runtimev1pb.TryLockRequest) (*runtimev1pb.TryLockResponse, error) {
	return s.api.TryLock(ctx, req)
}

func (s service) UnlockAlpha1(ctx context.Context, req *runtimev1pb.UnlockRequest) (*runtimev1pb.UnlockResponse, error) {
	return s.api.Unlock(ctx, req)
}

func (s service) GetMetadata(context.Context, *runtimev1pb.GetMetadataRequest) (*runtimev1pb.GetMetadataResponse, error) {
	return s.api.Metadata(), nil
}

// NewGRPCServer returns a gRPC server of Dapr's service with the lock API
// of a. Requests are small: a message over 64 KiB is refused.
func NewGRPCServer(a *API) *grpc.Server {
	s := grpc.NewServer(
		grpc.MaxRecvMsgSize(maxBody),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if !served[info.FullMethod] {
				return nil, unimplemented(info.FullMethod)
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(_ any, _ grpc.ServerStream, info *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
			return unimplemented(info.FullMethod)
		}),
		grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
			m, _ := grpc.MethodFromServerStream(stream)
			return unimplemented(m)
		}),
	)
	runtimev1pb.RegisterDaprServer(s, service{api: a})
	return s
}
