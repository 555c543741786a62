package dapr

import (
	"context"
	"strings"
	"testing"
	"time"

	runtimev1pb "github.com/dapr/dapr/pkg/proto/runtime/v1"
	daprsdk "github.com/dapr/go-sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// sdk connects Dapr's Go SDK to the sidecar's gRPC API, over TCP or over
// its unix socket.
func (s *sidecar) sdk(unix bool) daprsdk.Client {
	s.t.Helper()
	var (
		c   daprsdk.Client
		err error
	)
	if unix {
		c, err = daprsdk.NewClientWithSocket(s.grpcSock)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err = daprsdk.NewClientWithAddressContext(ctx, s.grpcAddr)
	}
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(c.Close)
	return c
}

// TestGoSDK: Dapr's Go SDK, over TCP and over a unix socket, locks and
// unlocks as against daprd.
func TestGoSDK(t *testing.T) {
	s := newSidecar(t, "pod-a", Config{Stores: DefaultStores(), AppID: "orders"})
	ctx := context.Background()
	for _, unix := range []bool{false, true} {
		name := map[bool]string{false: "tcp", true: "unix"}[unix]
		t.Run(name, func(t *testing.T) {
			c := s.sdk(unix)
			res := "job-" + name
			try := func(owner string, expiry int32) bool {
				t.Helper()
				r, err := c.TryLockAlpha1(ctx, "lockstore", &daprsdk.LockRequest{ResourceID: res, LockOwner: owner, ExpiryInSeconds: expiry})
				if err != nil {
					t.Fatal(err)
				}
				return r.Success
			}
			unlock := func(owner string, want int32, wantName string) {
				t.Helper()
				r, err := c.UnlockAlpha1(ctx, "lockstore", &daprsdk.UnlockRequest{ResourceID: res, LockOwner: owner})
				if err != nil {
					t.Fatal(err)
				}
				if r.StatusCode != want || r.Status != wantName {
					t.Fatalf("unlock by %s: %d %s; want %d %s", owner, r.StatusCode, r.Status, want, wantName)
				}
			}
			if !try("exec-a", 60) {
				t.Fatal("lock refused")
			}
			if h := s.holder("dapr/orders/" + res); h != "exec-a" {
				t.Fatalf("the Baton lock is held by %q, want exec-a", h)
			}
			if try("exec-b", 60) {
				t.Fatal("contended lock granted")
			}
			if try("exec-a", 60) {
				t.Fatal("the holder's second try granted: a try is not re-entrant")
			}
			unlock("exec-b", 2, "LOCK_BELONGS_TO_OTHERS")
			unlock("exec-a", 0, "SUCCESS")
			unlock("exec-a", 1, "LOCK_DOES_NOT_EXIST")

			// Expiry.
			if !try("exec-a", 1) {
				t.Fatal("lock refused")
			}
			deadline := time.Now().Add(10 * time.Second)
			for !try("exec-b", 30) {
				if time.Now().After(deadline) {
					t.Fatal("a lock with expiry 1s still held after 10s")
				}
				time.Sleep(100 * time.Millisecond)
			}
			unlock("exec-a", 1, "LOCK_DOES_NOT_EXIST")
			unlock("exec-b", 0, "SUCCESS")
		})
	}
}

// TestGRPCBadInput: bad requests get daprd's gRPC codes and messages, and
// write nothing to etcd; so do a malformed protobuf message and every Dapr
// call Baton does not serve.
func TestGRPCBadInput(t *testing.T) {
	s := newSidecar(t, "pod-a", Config{Stores: DefaultStores(), AppID: "orders"})
	ctx := context.Background()
	c := s.sdk(false)
	check := func(name string, err error, code codes.Code, msg string) {
		t.Helper()
		st, _ := status.FromError(err)
		if st.Code() != code || !strings.Contains(st.Message(), msg) {
			t.Errorf("%s: %v; want %v saying %q", name, err, code, msg)
		}
	}
	before := s.calls.Txns()
	lock := func(store, res, owner string, expiry int32) error {
		_, err := c.TryLockAlpha1(ctx, store, &daprsdk.LockRequest{ResourceID: res, LockOwner: owner, ExpiryInSeconds: expiry})
		return err
	}
	check("no resource id", lock("lockstore", "", "o", 5), codes.InvalidArgument, "ResourceId is empty in lock store lockstore")
	check("no owner", lock("lockstore", "r", "", 5), codes.InvalidArgument, "LockOwner is empty in lock store lockstore")
	check("expiry 0", lock("lockstore", "r", "o", 0), codes.InvalidArgument, "ExpiryInSeconds is not positive in lock store lockstore")
	check("negative expiry", lock("lockstore", "r", "o", -1), codes.InvalidArgument, "ExpiryInSeconds is not positive")
	check("expiry past the max hold", lock("lockstore", "r", "o", 90000), codes.InvalidArgument, "longer than the sidecar's maximum hold")
	check("unknown store", lock("redis", "r", "o", 5), codes.InvalidArgument, "lock store redis not found")
	check("resource id with ||", lock("lockstore", "a||b", "o", 5), codes.InvalidArgument, "can't contain '||'")
	_, err := c.UnlockAlpha1(ctx, "redis", &daprsdk.UnlockRequest{ResourceID: "r", LockOwner: "o"})
	check("unknown store, unlock", err, codes.InvalidArgument, "lock store redis not found")
	_, err = c.UnlockAlpha1(ctx, "lockstore", &daprsdk.UnlockRequest{ResourceID: "r"})
	check("unlock without owner", err, codes.InvalidArgument, "LockOwner is empty")

	// A malformed message: grpc-go's own answer, as daprd's.
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var out runtimev1pb.TryLockResponse
	err = conn.Invoke(ctx, runtimev1pb.Dapr_TryLockAlpha1_FullMethodName, []byte{0x0a, 0xff, 0x01}, &out, grpc.ForceCodec(rawCodec{}))
	check("malformed protobuf", err, codes.Internal, "error unmarshalling request")
	err = conn.Invoke(ctx, runtimev1pb.Dapr_TryLockAlpha1_FullMethodName, make([]byte, 70<<10), &out, grpc.ForceCodec(rawCodec{}))
	check("a message over 64 KiB", err, codes.ResourceExhausted, "larger than max")

	// Other Dapr APIs.
	_, err = c.GetState(ctx, "statestore", "k", nil)
	check("GetState", err, codes.Unimplemented, "Baton serves only Dapr's distributed lock API")
	_, err = runtimev1pb.NewDaprClient(conn).SubscribeConfigurationAlpha1(ctx, &runtimev1pb.SubscribeConfigurationRequest{})
	if err == nil {
		_, err = recvOne(ctx, conn)
	}
	check("a streaming call", err, codes.Unimplemented, "Baton serves only Dapr's distributed lock API")
	err = conn.Invoke(ctx, "/dapr.proto.runtime.v1.AppCallback/OnInvoke", []byte{}, &out, grpc.ForceCodec(rawCodec{}))
	check("another service", err, codes.Unimplemented, "/dapr.proto.runtime.v1.AppCallback/OnInvoke is not served")
	if n := s.calls.Txns() - before; n != 0 {
		t.Fatalf("%d etcd transactions for bad requests", n)
	}

	md, err := c.GetMetadata(ctx)
	if err != nil || md.ID != "orders" || len(md.RegisteredComponents) != 1 || md.RegisteredComponents[0].Name != "lockstore" {
		t.Fatalf("GetMetadata: %+v, %v", md, err)
	}
}

// recvOne reads a streaming call's first answer.
func recvOne(ctx context.Context, conn *grpc.ClientConn) (*runtimev1pb.SubscribeConfigurationResponse, error) {
	st, err := runtimev1pb.NewDaprClient(conn).SubscribeConfigurationAlpha1(ctx, &runtimev1pb.SubscribeConfigurationRequest{})
	if err != nil {
		return nil, err
	}
	return st.Recv()
}

// rawCodec sends bytes as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { return nil }
func (rawCodec) Name() string                       { return "proto" }

// TestTwoSidecarsOneLock: two sidecars, a Go SDK client on each, one lock;
// when the holder's sidecar crashes (its lease is no longer kept alive),
// the other gets the lock once the lease has expired, and not before.
func TestTwoSidecarsOneLock(t *testing.T) {
	cfg := Config{Stores: DefaultStores(), AppID: "orders"}
	a, b := newSidecar(t, "pod-a", cfg), newSidecar(t, "pod-b", cfg)
	ca, cb := a.sdk(false), b.sdk(true)
	ctx := context.Background()
	try := func(c daprsdk.Client, owner string) bool {
		t.Helper()
		r, err := c.TryLockAlpha1(ctx, "lockstore", &daprsdk.LockRequest{ResourceID: "migration", LockOwner: owner, ExpiryInSeconds: 300})
		if err != nil {
			t.Fatal(err)
		}
		return r.Success
	}
	if !try(ca, "exec-a") {
		t.Fatal("lock through a refused")
	}
	if try(cb, "exec-b") {
		t.Fatal("lock through b granted while a holds it")
	}
	r, err := cb.UnlockAlpha1(ctx, "lockstore", &daprsdk.UnlockRequest{ResourceID: "migration", LockOwner: "exec-b"})
	if err != nil || r.StatusCode != 2 {
		t.Fatalf("unlock through b by exec-b: %+v, %v; want LOCK_BELONGS_TO_OTHERS", r, err)
	}
	crashed := time.Now()
	a.kill()
	for !try(cb, "exec-b") {
		if time.Since(crashed) > 15*time.Second {
			t.Fatal("the crashed sidecar's lock was never freed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	gap := time.Since(crashed)
	t.Logf("granted through b %v after a's sidecar stopped keeping its lease (lease TTL 2s)", gap)
	if gap < time.Second {
		t.Fatalf("granted %v after the crash: before the lease could expire", gap)
	}
	if h := b.holder("dapr/orders/migration"); h != "exec-b" {
		t.Fatalf("held by %q, want exec-b", h)
	}
}
