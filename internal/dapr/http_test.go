package dapr

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	daprsdk "github.com/dapr/go-sdk/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/engine"
	"github.com/baton-dev/baton/internal/testing/sidecartest"
)

// TestHTTPLockAPI: Dapr's lock API over HTTP as daprd answers it: a
// contended lock is 200 false (also to its own owner: a try is not
// re-entrant), unlock statuses 0, 1 and 2, and the expiry as the ttl.
func TestHTTPLockAPI(t *testing.T) {
	operators := sidecartest.Operators(t) // the operator below force-releases
	s := newSidecar(t, "pod-a", Config{Stores: DefaultStores(), AppID: "orders"}, func(c *engine.Config) { c.PolicyFile = operators })
	lock := func(body string) reply { return s.do(http.MethodPost, "/v1.0-alpha1/lock/lockstore", body) }
	unlock := func(body string) reply { return s.do(http.MethodPost, "/v1.0-alpha1/unlock/lockstore", body) }
	expect := func(what string, r reply, field string, want any) {
		t.Helper()
		if r.status != http.StatusOK || r.body[field] != want {
			t.Fatalf("%s: %d %s; want 200 and %s %v", what, r.status, r.raw, field, want)
		}
	}

	expect("lock", lock(`{"resourceId":"job-1","lockOwner":"exec-a","expiryInSeconds":60}`), "success", true)
	if h := s.holder("dapr/orders/job-1"); h != "exec-a" {
		t.Fatalf("the Baton lock dapr/orders/job-1 is held by %q, want exec-a", h)
	}
	expect("contended lock", lock(`{"resourceId":"job-1","lockOwner":"exec-b","expiryInSeconds":60}`), "success", false)
	expect("the holder again", lock(`{"resourceId":"job-1","lockOwner":"exec-a","expiryInSeconds":60}`), "success", false)
	expect("unlock by another owner", unlock(`{"resourceId":"job-1","lockOwner":"exec-b"}`), "status", float64(2))
	expect("unlock by its owner", unlock(`{"resourceId":"job-1","lockOwner":"exec-a"}`), "status", float64(0))
	expect("unlock of a free lock", unlock(`{"resourceId":"job-1","lockOwner":"exec-a"}`), "status", float64(1))
	if h := s.holder("dapr/orders/job-1"); h != "" {
		t.Fatalf("unlocked, yet held by %q", h)
	}

	// protobuf's JSON mapping, as daprd decodes: snake_case names, an
	// int32 as a string, unknown fields ignored.
	expect("snake_case", lock(`{"resource_id":"job-2","lock_owner":"exec-a","expiry_in_seconds":"1","extra":true}`), "success", true)
	expect("snake_case contended", lock(`{"resource_id":"job-2","lock_owner":"exec-b","expiry_in_seconds":5}`), "success", false)
	// Expiry: the lock is free after expiryInSeconds, and its owner's
	// unlock then finds no lock.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r := lock(`{"resourceId":"job-2","lockOwner":"exec-b","expiryInSeconds":5}`); r.body["success"] == true {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a lock with expiryInSeconds 1 still held after 10s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	expect("unlock after the expiry", unlock(`{"resourceId":"job-2","lockOwner":"exec-a"}`), "status", float64(1))
	expect("unlock by the new holder", unlock(`{"resourceId":"job-2","lockOwner":"exec-b"}`), "status", float64(0))

	// A Dapr lock is a Baton lock: an operator may force it free; its
	// owner's unlock then finds no lock, and the next try gets it.
	expect("lock again", lock(`{"resourceId":"job-3","lockOwner":"exec-a","expiryInSeconds":60}`), "success", true)
	if _, err := s.coord.ForceRelease(context.Background(), mustKey(t, "dapr/orders/job-3"), 0, "operator"); err != nil {
		t.Fatal(err)
	}
	expect("unlock after a force release", unlock(`{"resourceId":"job-3","lockOwner":"exec-a"}`), "status", float64(1))
	expect("lock after a force release", lock(`{"resourceId":"job-3","lockOwner":"exec-b","expiryInSeconds":60}`), "success", true)

	// The resource id is any string but "||".
	expect("any resource id", lock(`{"resourceId":"order:42/é","lockOwner":"exec-a","expiryInSeconds":60}`), "success", true)
	if h := s.holder("dapr/orders/order_3A42_2F_C3_A9"); h != "exec-a" {
		t.Fatalf("order:42/é: Baton lock held by %q", h)
	}
	expect("any resource id unlocked", unlock(`{"resourceId":"order:42/é","lockOwner":"exec-a"}`), "status", float64(0))
}

// TestHTTPBadInput: each bad request gets daprd's status, error code and a
// message saying what to fix, and writes nothing to etcd.
func TestHTTPBadInput(t *testing.T) {
	s := newSidecar(t, "pod-a", Config{Stores: DefaultStores(), AppID: "orders"})
	for _, tt := range []struct {
		name, method, path, body string
		status                   int
		code, msg                string
	}{
		{"no resource id", "POST", "/v1.0-alpha1/lock/lockstore", `{"lockOwner":"o","expiryInSeconds":5}`, 400, CodeMalformedRequest, "ResourceId is empty in lock store lockstore"},
		{"no owner", "POST", "/v1.0-alpha1/lock/lockstore", `{"resourceId":"r","expiryInSeconds":5}`, 400, CodeMalformedRequest, "LockOwner is empty in lock store lockstore"},
		{"no expiry", "POST", "/v1.0-alpha1/lock/lockstore", `{"resourceId":"r","lockOwner":"o"}`, 400, CodeMalformedRequest, "ExpiryInSeconds is not positive in lock store lockstore"},
		{"expiry 0", "POST", "/v1.0-alpha1/lock/lockstore", `{"resourceId":"r","lockOwner":"o","expiryInSeconds":0}`, 400, CodeMalformedRequest, "ExpiryInSeconds is not positive"},
		{"negative expiry", "POST", "/v1.0-alpha1/lock/lockstore", `{"resourceId":"r","lockOwner":"o","expiryInSeconds":-3}`, 400, CodeMalformedRequest, "ExpiryInSeconds is not positive"},
		{"expiry past the max hold", "POST", "/v1.0-alpha1/lock/lockstore", `{"resourceId":"r","lockOwner":"o","expiryInSeconds":90000}`, 400, CodeMalformedRequest, "ExpiryInSeconds: 25h0m0s is longer than the sidecar's maximum hold 24h0m0s"},
		{"expiry not an int32", "POST", "/v1.0-alpha1/lock/lockstore", `{"resourceId":"r","lockOwner":"o","expiryInSeconds":1e12}`, 400, CodeMalformedRequest, "failed deserializing HTTP body"},
		{"empty body", "POST", "/v1.0-alpha1/lock/lockstore", ``, 400, CodeMalformedRequest, "ExpiryInSeconds is not positive"},
		{"unknown store", "POST", "/v1.0-alpha1/lock/redis", `{"resourceId":"r","lockOwner":"o","expiryInSeconds":5}`, 400, CodeLockStoreNotFound, `lock store redis not found; this Baton sidecar serves ["lockstore"]`},
		{"unknown store, unlock", "POST", "/v1.0-alpha1/unlock/redis", `{"resourceId":"r","lockOwner":"o"}`, 400, CodeLockStoreNotFound, "lock store redis not found"},
		{"unlock without owner", "POST", "/v1.0-alpha1/unlock/lockstore", `{"resourceId":"r"}`, 400, CodeMalformedRequest, "LockOwner is empty"},
		{"unlock without resource", "POST", "/v1.0-alpha1/unlock/lockstore", `{"lockOwner":"o"}`, 400, CodeMalformedRequest, "ResourceId is empty"},
		{"malformed JSON", "POST", "/v1.0-alpha1/lock/lockstore", `{"resourceId":`, 400, CodeMalformedRequest, "failed deserializing HTTP body"},
		{"not an object", "POST", "/v1.0-alpha1/unlock/lockstore", `["r","o"]`, 400, CodeMalformedRequest, "failed deserializing HTTP body"},
		{"owner with a space", "POST", "/v1.0-alpha1/lock/lockstore", `{"resourceId":"r","lockOwner":"a b","expiryInSeconds":5}`, 400, CodeMalformedRequest, "LockOwner: "},
		{"resource id with ||", "POST", "/v1.0-alpha1/lock/lockstore", `{"resourceId":"a||b","lockOwner":"o","expiryInSeconds":5}`, 400, CodeMalformedRequest, "can't contain '||'"},
		{"resource id too long", "POST", "/v1.0-alpha1/lock/lockstore", `{"resourceId":"` + strings.Repeat("r", 200) + `","lockOwner":"o","expiryInSeconds":5}`, 400, CodeMalformedRequest, "at most 128 fit"},
		{"body too large", "POST", "/v1.0-alpha1/lock/lockstore", `{"resourceId":"` + strings.Repeat("r", 70<<10) + `"}`, 413, CodeBodyRead, "larger than 65536 bytes"},
		{"GET a lock", "GET", "/v1.0-alpha1/lock/lockstore", ``, 405, CodeMalformedRequest, "GET is not allowed on /v1.0-alpha1/lock/lockstore; use POST"},
		{"another Dapr API", "GET", "/v1.0/state/statestore/k", ``, 501, CodeAPIUnimplemented, "GET /v1.0/state/statestore/k is not served: Baton serves only Dapr's distributed lock API"},
		{"a path under the store", "POST", "/v1.0-alpha1/lock/lockstore/x", `{}`, 501, CodeAPIUnimplemented, "is not served"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := s.calls.Txns()
			r := s.do(tt.method, tt.path, tt.body)
			if r.status != tt.status || r.body["errorCode"] != tt.code {
				t.Fatalf("%d %s; want %d %s", r.status, r.raw, tt.status, tt.code)
			}
			if m, _ := r.body["message"].(string); !strings.Contains(m, tt.msg) {
				t.Fatalf("message %q; want it to say %q", m, tt.msg)
			}
			if n := s.calls.Txns() - before; n != 0 {
				t.Fatalf("%d etcd transactions for a bad request", n)
			}
		})
	}
}

// TestHTTPHealthAndMetadata: what the SDKs call before their first
// request answers as daprd does.
func TestHTTPHealthAndMetadata(t *testing.T) {
	s := newSidecar(t, "pod-a", Config{Stores: append(DefaultStores(), Store{Name: "shared", Prefix: "dapr", KeyPrefix: KeyPrefixName}), AppID: "orders"})
	for _, p := range []string{"/v1.0/healthz", "/v1.0/healthz/outbound"} {
		if r := s.do(http.MethodGet, p, ""); r.status != http.StatusNoContent {
			t.Errorf("GET %s: %d %s; want 204", p, r.status, r.raw)
		}
	}
	r := s.do(http.MethodGet, "/v1.0/metadata", "")
	comps, _ := r.body["components"].([]any)
	if r.status != 200 || r.body["id"] != "orders" || len(comps) != 2 {
		t.Fatalf("metadata: %d %s; want the app id orders and 2 components", r.status, r.raw)
	}
	if c, _ := comps[1].(map[string]any); c["name"] != "shared" || c["type"] != "lock.baton" {
		t.Errorf("metadata component %v; want shared of type lock.baton", comps[1])
	}
	if r := s.do(http.MethodPost, "/v1.0/healthz", ""); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1.0/healthz: %d", r.status)
	}
}

// TestUnavailable: a sidecar that cannot grant (here: shut down) answers
// daprd's errors for a component that failed, and its health says not
// ready; over gRPC, Internal.
func TestUnavailable(t *testing.T) {
	s := newSidecar(t, "pod-a", Config{Stores: DefaultStores(), AppID: "orders"})
	c := s.sdk(false)
	s.coord.Shutdown()
	for _, tt := range []struct {
		path, body, code string
		status           int
	}{
		{"/v1.0-alpha1/lock/lockstore", `{"resourceId":"r","lockOwner":"o","expiryInSeconds":5}`, CodeTryLock, 500},
		{"/v1.0-alpha1/unlock/lockstore", `{"resourceId":"r","lockOwner":"o"}`, CodeUnlock, 500},
	} {
		r := s.do(http.MethodPost, tt.path, tt.body)
		if m, _ := r.body["message"].(string); r.status != tt.status || r.body["errorCode"] != tt.code || !strings.Contains(m, "unavailable") {
			t.Errorf("POST %s: %d %s; want %d %s saying unavailable", tt.path, r.status, r.raw, tt.status, tt.code)
		}
	}
	for path, code := range map[string]string{"/v1.0/healthz": CodeHealthNotReady, "/v1.0/healthz/outbound": CodeOutboundNotReady} {
		if r := s.do(http.MethodGet, path, ""); r.status != 500 || r.body["errorCode"] != code {
			t.Errorf("GET %s: %d %s; want 500 %s", path, r.status, r.raw, code)
		}
	}
	_, err := c.TryLockAlpha1(context.Background(), "lockstore", &daprsdk.LockRequest{ResourceID: "r", LockOwner: "o", ExpiryInSeconds: 5})
	if st, _ := status.FromError(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "failed to try acquiring lock") {
		t.Errorf("TryLockAlpha1: %v; want Internal, failed to try acquiring lock", err)
	}
}

// TestPolicyRefusal: a lock policy governs Dapr locks as any other: a
// refused try-lock is 403 (PermissionDenied) saying why, and nothing is
// written.
func TestPolicyRefusal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	doc := "policies:\n- name: orders\n  rules:\n  - serviceAccounts: [\"*\"]\n    keys: [\"dapr/orders/public\"]\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newSidecar(t, "pod-a", Config{Stores: DefaultStores(), AppID: "orders"}, func(c *engine.Config) { c.PolicyFile = path })
	before := s.calls.Txns()
	r := s.do(http.MethodPost, "/v1.0-alpha1/lock/lockstore", `{"resourceId":"secret","lockOwner":"o","expiryInSeconds":5}`)
	if m, _ := r.body["message"].(string); r.status != 403 || r.body["errorCode"] != CodeTryLock || !strings.Contains(m, "dapr/orders/secret") {
		t.Errorf("a refused try-lock: %d %s", r.status, r.raw)
	}
	_, err := s.sdk(false).TryLockAlpha1(context.Background(), "lockstore", &daprsdk.LockRequest{ResourceID: "secret", LockOwner: "o", ExpiryInSeconds: 5})
	if st, _ := status.FromError(err); st.Code() != codes.PermissionDenied {
		t.Errorf("TryLockAlpha1 refused by the policy: %v; want PermissionDenied", err)
	}
	if n := s.calls.Txns() - before; n != 0 {
		t.Errorf("%d etcd transactions for refused calls", n)
	}
	if r := s.do(http.MethodPost, "/v1.0-alpha1/lock/lockstore", `{"resourceId":"public","lockOwner":"o","expiryInSeconds":5}`); r.body["success"] != true {
		t.Errorf("an allowed try-lock: %d %s", r.status, r.raw)
	}
}
