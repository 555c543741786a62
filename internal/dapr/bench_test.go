package dapr

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	daprsdk "github.com/dapr/go-sdk/client"

	"github.com/baton-dev/baton/internal/server"
)

// BenchmarkCycle measures one lock and unlock of a free lock, one caller
// at a time, through Baton's socket API and through Dapr's API over HTTP
// and gRPC, side by side on one sidecar and etcd: what Dapr's protocol
// costs over Baton's own.
func BenchmarkCycle(b *testing.B) {
	s := newSidecar(b, "bench", Config{Stores: DefaultStores(), AppID: "bench"})
	sock := filepath.Join(b.TempDir(), "baton.sock")
	srv, err := server.New(server.Default(), s.coord, s.log)
	if err != nil {
		b.Fatal(err)
	}
	l, err := server.ListenUnix(sock)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { server.Serve(ctx, srv.HTTPServer(srv.Handler()), l, time.Second); close(done) }()
	b.Cleanup(func() { cancel(); <-done; os.Remove(sock) })
	unixC := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	post := func(c *http.Client, url, body, want string) {
		resp, err := c.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(got), want) {
			b.Fatalf("POST %s: %d %s; want %s", url, resp.StatusCode, got, want)
		}
	}

	c := s.sdk(false) // before the sub-benchmarks: the SDK says so on stdout
	b.Run("baton-socket", func(b *testing.B) {
		for range b.N {
			post(unixC, "http://baton/v1/locks/cycle-socket", `{"owner":"me","ttl":"1m"}`, `"granted":true`)
			req, _ := http.NewRequest(http.MethodDelete, "http://baton/v1/locks/cycle-socket?owner=me", nil)
			resp, err := unixC.Do(req)
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("release: %v %v", err, resp)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	b.Run("dapr-http", func(b *testing.B) {
		for range b.N {
			post(http.DefaultClient, s.httpURL+"/v1.0-alpha1/lock/lockstore", `{"resourceId":"cycle-http","lockOwner":"me","expiryInSeconds":60}`, `{"success":true}`)
			post(http.DefaultClient, s.httpURL+"/v1.0-alpha1/unlock/lockstore", `{"resourceId":"cycle-http","lockOwner":"me"}`, `{"status":0}`)
		}
	})
	b.Run("dapr-grpc", func(b *testing.B) {
		for range b.N {
			r, err := c.TryLockAlpha1(ctx, "lockstore", &daprsdk.LockRequest{ResourceID: "cycle-grpc", LockOwner: "me", ExpiryInSeconds: 60})
			if err != nil || !r.Success {
				b.Fatalf("try-lock: %v %v", r, err)
			}
			u, err := c.UnlockAlpha1(ctx, "lockstore", &daprsdk.UnlockRequest{ResourceID: "cycle-grpc", LockOwner: "me"})
			if err != nil || u.StatusCode != 0 {
				b.Fatalf("unlock: %v %v", u, err)
			}
		}
	})
}
