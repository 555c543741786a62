package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

// TestSecureEtcd runs sidecars on an external etcd as a careful operator
// runs one: clients over TLS with client certificates of its CA, and
// etcd's authentication on, each namespace's etcd user limited by its role
// to its own scope's keys. It checks the boundary as an attacker would
// (with etcd's client, not through a sidecar), that each namespace's
// sidecar serves its scope (one user authenticated by its certificate, one
// by a password), and that a sidecar whose user lacks its scope says so
// and becomes ready once the role grants it, without a restart.
func TestSecureEtcd(t *testing.T) {
	sec, err := etcdtest.StartSecure()
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	scopeA, scopeB := "team-a", "team-b"
	for _, u := range []struct{ user, password, scope string }{{"team-a", "", scopeA}, {"team-b", "b-secret", scopeB}} {
		if err := sec.AddUser(ctx, u.user, u.password); err != nil {
			t.Fatal(err)
		}
		if err := sec.GrantScope(ctx, u.user, u.scope); err != nil {
			t.Fatal(err)
		}
	}
	ep := sec.Endpoints()[0]

	t.Run("clients without TLS or a certificate are refused", func(t *testing.T) {
		plain := strings.Replace(ep, "https://", "http://", 1)
		if err := tryGet(ctx, clientv3.Config{Endpoints: []string{plain}}); err == nil {
			t.Error("a plaintext client read from the TLS etcd")
		}
		pool := x509.NewCertPool()
		pool.AddCert(sec.CA.Cert)
		if err := tryGet(ctx, clientv3.Config{Endpoints: []string{ep}, TLS: &tls.Config{RootCAs: pool}}); err == nil {
			t.Error("a client without a certificate read from the etcd")
		}
	})

	t.Run("a namespace's user cannot touch another namespace's keys", func(t *testing.T) {
		cli, err := sec.Client("team-a", "")
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		theirs := base(t, scopeB)
		if _, err := cli.Get(ctx, theirs, clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("read of team-b's keys with team-a's certificate: %v, want permission denied", err)
		}
		if _, err := cli.Put(ctx, theirs+"planted", "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("write of team-b's keys: %v, want permission denied", err)
		}
		if _, err := cli.Delete(ctx, theirs, clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("delete of team-b's keys: %v, want permission denied", err)
		}
		if _, err := cli.Get(ctx, "/", clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("read of every key: %v, want permission denied", err)
		}
		if _, err := cli.Get(ctx, base(t, scopeA), clientv3.WithPrefix()); err != nil {
			t.Errorf("read of its own keys: %v", err)
		}
	})

	t.Run("each namespace's sidecar serves its scope", func(t *testing.T) {
		certA, keyA, err := sec.ClientFiles("team-a")
		if err != nil {
			t.Fatal(err)
		}
		certB, keyB, err := sec.ClientFiles("team-b")
		if err != nil {
			t.Fatal(err)
		}
		a := serveSecure(t, nil, scopeA, "--etcd-endpoints", ep, "--etcd-cacert", sec.CAFile, "--etcd-cert", certA, "--etcd-key", keyA)
		b := serveSecure(t, map[string]string{"BATON_ETCD_PASSWORD": "b-secret"}, scopeB, "--etcd-endpoints", ep,
			"--etcd-cacert", sec.CAFile, "--etcd-cert", certB, "--etcd-key", keyB, "--etcd-username", "team-b")
		for _, s := range []*secureSidecar{a, b} {
			s.waitReady(t)
			s.call(t, "POST", "/v1/locks/nightly", `{"owner":"job-1"}`, http.StatusOK, "")
			if n := countKeys(t, sec.Root(), base(t, s.scope)); n != 1 {
				t.Errorf("%s: %d keys in etcd while held, want 1", s.scope, n)
			}
			s.call(t, "DELETE", "/v1/locks/nightly?owner=job-1", "", http.StatusOK, "")
			// Shutting down revokes the lease: its user may, as it may
			// write every key on it.
			s.call(t, "POST", "/v1/locks/held-at-exit", `{"owner":"job-2"}`, http.StatusOK, "")
			s.stop()
			if n := countKeys(t, sec.Root(), base(t, s.scope)); n != 0 {
				t.Errorf("%s: %d keys left after shutdown, want its lease revoked", s.scope, n)
			}
		}
	})

	t.Run("a sidecar whose user lacks its scope says so until granted", func(t *testing.T) {
		certA, keyA, err := sec.ClientFiles("team-a")
		if err != nil {
			t.Fatal(err)
		}
		// team-a's certificate, team-c's scope: a namespace given the
		// wrong credentials.
		c := serveSecure(t, nil, "team-c", "--etcd-endpoints", ep, "--etcd-cacert", sec.CAFile, "--etcd-cert", certA, "--etcd-key", keyA)
		waitUntil(t, 20*time.Second, "the log names the user and the keys", func() bool {
			l := c.stderr.String()
			return strings.Contains(l, "etcd refuses this sidecar its scope") && strings.Contains(l, "team-a") && strings.Contains(l, base(t, "team-c"))
		})
		body := c.call(t, "GET", "/readyz", "", http.StatusServiceUnavailable, lockapi.CodeEtcdPermissionDenied)
		if !strings.Contains(body.Message, "team-a") {
			t.Errorf("readyz message %q does not name the user", body.Message)
		}
		body = c.call(t, "POST", "/v1/locks/nightly", `{"owner":"job-1"}`, http.StatusServiceUnavailable, lockapi.CodeEtcdPermissionDenied)
		if !strings.Contains(body.Message, "team-a") || !strings.Contains(body.Message, base(t, "team-c")) {
			t.Errorf("acquire message %q does not name the user and the keys", body.Message)
		}
		if n := countKeys(t, sec.Root(), base(t, "team-c")); n != 0 {
			t.Errorf("%d keys written under the refused scope", n)
		}
		if err := sec.GrantScope(ctx, "team-a", "team-c"); err != nil {
			t.Fatal(err)
		}
		c.waitReady(t)
		c.call(t, "POST", "/v1/locks/nightly", `{"owner":"job-1"}`, http.StatusOK, "")
	})
}

// base is the etcd prefix of scope's locks: what its role must grant.
func base(t *testing.T, scope string) string {
	t.Helper()
	l, err := keyspace.NewLayout(scope)
	if err != nil {
		t.Fatal(err)
	}
	return l.Base()
}

// tryGet reads one key with a client of cfg, within a few seconds.
func tryGet(ctx context.Context, cfg clientv3.Config) error {
	cfg.DialTimeout, cfg.Logger = 2*time.Second, zap.NewNop()
	cli, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = cli.Get(ctx, "/baton/")
	return err
}

func countKeys(t *testing.T, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	r, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return r.Count
}

// secureSidecar is `baton serve` in this process, not waited for: a
// sidecar that etcd refuses never prints its ready line.
type secureSidecar struct {
	scope  string
	http   *http.Client
	stderr *syncBuffer
	stop   func() // shuts the sidecar down, as SIGTERM does
}

// serveSecure starts `baton serve --scope scope args...` with the
// environment vars and waits for its socket.
func serveSecure(t *testing.T, vars map[string]string, scope string, args ...string) *secureSidecar {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "baton.sock")
	s := &secureSidecar{scope: scope, http: unixClient(sock), stderr: &syncBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	args = append([]string{"serve", "--socket", sock, "--scope", scope, "--health-addr", "", "--state-file", filepath.Join(t.TempDir(), "state.json")}, args...)
	go func() { done <- run(ctx, args, env(vars), io.Discard, s.stderr) }()
	var once sync.Once
	s.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(s.stop)
	waitUntil(t, 30*time.Second, "the socket", func() bool {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("exit %d; stderr: %s", code, s.stderr.String())
		default:
		}
		_, err := os.Stat(sock)
		return err == nil
	})
	return s
}

func (s *secureSidecar) waitReady(t *testing.T) {
	t.Helper()
	waitUntil(t, 20*time.Second, s.scope+" ready", func() bool {
		resp, err := s.http.Get("http://baton/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// call sends a request and wants status and, for an error, code.
func (s *secureSidecar) call(t *testing.T, method, path, body string, status int, code string) lockapi.Error {
	t.Helper()
	got, b := do(t, s.http, method, path, body)
	var e lockapi.Error
	_ = json.Unmarshal([]byte(b), &e)
	if got != status || e.Code != code {
		t.Errorf("%s %s on %s: %d %s, want %d %q", method, path, s.scope, got, b, status, code)
	}
	return e
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
