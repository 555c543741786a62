package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/policy"
)

// allowForce is a policy file letting every ServiceAccount lock and force
// release every key: the policy of a sidecar run by hand.
const allowForce = `policies:
- name: operators
  rules:
  - serviceAccounts: ["*"]
    keys: ["*"]
    forceRelease: true
`

// TestLockPolicyFromEtcd: the policy the controller writes into etcd
// governs running sidecars within seconds: a ServiceAccount gets 403
// forbidden (naming the policy) on keys outside its rules and on force
// release, writing nothing; an allowed one succeeds; with no policy any
// key may be locked and force release is refused; a policy that cannot be
// read leaves the sidecar failing closed.
func TestLockPolicyFromEtcd(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-policy")
	defer os.RemoveAll(dir)
	scope := "policy-test"
	l, err := keyspace.NewLayout(scope)
	if err != nil {
		t.Fatal(err)
	}
	cli, _ := testEtcd.Client(t)
	ctx := context.Background()
	runner := startProc(t, filepath.Join(dir, "runner.sock"), scope, "--service-account", "runner")
	web := startProc(t, filepath.Join(dir, "web.sock"), scope, "--service-account", "web")
	rc, wc := unixClient(runner.socket), unixClient(web.socket)

	// No policy: any key, no force release.
	expect(t, rc, "POST", "/v1/locks/tf/prod", `{"owner":"a","ttl":"1m"}`, http.StatusOK, "")
	body := expect(t, wc, "DELETE", "/v1/locks/tf/prod?force=true", "", http.StatusForbidden, lockapi.CodeForbidden)
	if !strings.Contains(body.Message, "no LockPolicy") || !strings.Contains(body.Message, `"web"`) {
		t.Errorf("default refusal %q does not say why and whom", body.Message)
	}
	// The log arrives through a pipe: a moment after the answer.
	eventually(t, "an audit line naming the peer for the refused force release", func() bool {
		return strings.Contains(web.stderr.String(), "audit: call refused by the lock policy") && strings.Contains(web.stderr.String(), "peerPID")
	})

	doc := policy.Document{Policies: []policy.Policy{
		{Name: "pipelines", Rules: []policy.Rule{{ServiceAccounts: []string{"runner"}, Keys: []string{"tf/", "deploy-"}, ForceRelease: true}}},
		{Name: "shared", Rules: []policy.Rule{{ServiceAccounts: []string{"*"}, Keys: []string{"shared/"}}}},
	}}
	if _, err := cli.Put(ctx, l.Policy(), string(doc.Encode())); err != nil {
		t.Fatal(err)
	}
	eventually(t, "web refused tf/ under the new policy", func() bool {
		// A key of its own: acquires that pass before the policy arrives
		// hold it.
		code, _ := do(t, wc, "POST", "/v1/locks/tf/poll", `{"owner":"w"}`)
		return code == http.StatusForbidden
	})
	body = expect(t, wc, "POST", "/v1/locks/tf/staging", `{"owner":"w"}`, http.StatusForbidden, lockapi.CodeForbidden)
	if !strings.Contains(body.Message, "pipelines") || !strings.Contains(body.Message, "shared") || body.Key != "tf/staging" {
		t.Errorf("refusal %+v does not name the policies in force", body)
	}
	if n := countKeys(t, cli, l.LockPrefix(mustKey(t, "tf/staging"))); n != 0 {
		t.Errorf("a refused acquire wrote %d keys", n)
	}
	expect(t, wc, "POST", "/v1/locks/shared/cache", `{"owner":"w"}`, http.StatusOK, "")
	body = expect(t, wc, "DELETE", "/v1/locks/tf/prod?force=true", "", http.StatusForbidden, lockapi.CodeForbidden)
	if !strings.Contains(body.Message, `"web" may not force release`) {
		t.Errorf("force refusal %q", body.Message)
	}
	expect(t, rc, "POST", "/v1/locks/deploy-eu", `{"owner":"r"}`, http.StatusOK, "")
	expect(t, rc, "POST", "/v1/locks/other", `{"owner":"r"}`, http.StatusForbidden, lockapi.CodeForbidden)
	expect(t, rc, "DELETE", "/v1/locks/shared/cache?force=true", "", http.StatusForbidden, lockapi.CodeForbidden)
	expect(t, rc, "DELETE", "/v1/locks/tf/prod?force=true&by=oncall", "", http.StatusOK, "")
	eventually(t, "the force release's log naming the ServiceAccount", func() bool {
		s := runner.stderr.String()
		return strings.Contains(s, "lock force-released") && strings.Contains(s, `ServiceAccount \"runner\"`)
	})
	// Releasing one's own lock is never refused.
	expect(t, wc, "DELETE", "/v1/locks/shared/cache?owner=w", "", http.StatusOK, "")

	// A document nobody can read: every lock call fails closed, and the
	// sidecar is not ready, until it is fixed.
	if _, err := cli.Put(ctx, l.Policy(), `{"policies":[{"name":"x"}]}`); err != nil {
		t.Fatal(err)
	}
	eventually(t, "an invalid policy refuses", func() bool {
		code, _ := do(t, wc, "POST", "/v1/locks/shared/x", `{"owner":"w"}`)
		return code == http.StatusServiceUnavailable
	})
	body = expect(t, wc, "POST", "/v1/locks/shared/x", `{"owner":"w"}`, http.StatusServiceUnavailable, lockapi.CodeUnavailable)
	if !strings.Contains(body.Message, `policy "x" has no rules`) || !strings.Contains(body.Message, l.Policy()) {
		t.Errorf("invalid policy message %q", body.Message)
	}
	expect(t, wc, "GET", "/readyz", "", http.StatusServiceUnavailable, lockapi.CodeUnavailable)

	// Deleted: the default again.
	if _, err := cli.Delete(ctx, l.Policy()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the default policy after the delete", func() bool {
		code, _ := do(t, wc, "POST", "/v1/locks/anything", `{"owner":"w"}`)
		return code == http.StatusOK
	})
	expect(t, rc, "DELETE", "/v1/locks/anything?force=true", "", http.StatusForbidden, lockapi.CodeForbidden)
}

// TestLockPolicyFile: --policy-file replaces etcd's policy, is checked at
// start, and is read again when it changes.
func TestLockPolicyFile(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-policy-file")
	defer os.RemoveAll(dir)
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte("policies:\n- name: p\n  rules:\n  - serviceAccounts: [\"*\"]\n    keyz: [\"*\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	code := run(context.Background(), []string{"serve", "--socket", filepath.Join(dir, "x.sock"), "--policy-file", pol, "--etcd-endpoints", testEtcd.Endpoints()[0]}, env(nil), &strings.Builder{}, &errb)
	if code != 2 || !strings.Contains(errb.String(), `--policy-file`) || !strings.Contains(errb.String(), `unknown field "keyz"`) {
		t.Errorf("a bad policy file: exit %d, %s", code, errb.String())
	}
	// The file docs/security.md shows, as it is.
	if doc, err := os.ReadFile("../../docs/security.md"); err != nil || !strings.Contains(string(doc), "```yaml\n"+allowForce+"```") {
		t.Errorf("docs/security.md does not show the policy file this test uses (%v)", err)
	}
	if err := os.WriteFile(pol, []byte(allowForce), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, filepath.Join(dir, "s.sock"), "policy-file-test", "--policy-file", pol)
	c := unixClient(p.socket)
	expect(t, c, "POST", "/v1/locks/job", `{"owner":"a"}`, http.StatusOK, "")
	expect(t, c, "DELETE", "/v1/locks/job?force=true", "", http.StatusOK, "")
	narrow := "policies:\n- name: narrow\n  rules:\n  - serviceAccounts: [\"*\"]\n    keys: [\"batch/\"]\n"
	if err := os.WriteFile(pol, []byte(narrow), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the changed file in force", func() bool {
		code, _ := do(t, c, "POST", "/v1/locks/job", `{"owner":"a"}`)
		return code == http.StatusForbidden
	})
	expect(t, c, "POST", "/v1/locks/batch/1", `{"owner":"a"}`, http.StatusOK, "")
	// baton run says so, with its own exit status.
	errb.Reset()
	if code := run(context.Background(), []string{"run", "--socket", p.socket, "--key", "job", "--", "true"}, env(nil), &strings.Builder{}, &errb); code != exitForbidden ||
		!strings.Contains(errb.String(), "forbidden") || !strings.Contains(errb.String(), "narrow") {
		t.Errorf("baton run outside the policy: exit %d, %s; want %d naming the policy", code, errb.String(), exitForbidden)
	}
}

// expect makes a call and checks its status and, when code is not empty,
// its error code; it returns the error body.
func expect(t *testing.T, c *http.Client, method, path, body string, status int, code string) lockapi.Error {
	t.Helper()
	got, out := do(t, c, method, path, body)
	var e lockapi.Error
	_ = json.Unmarshal([]byte(out), &e)
	if got != status || (code != "" && e.Code != code) {
		t.Fatalf("%s %s: %d %s; want %d %s", method, path, got, out, status, code)
	}
	return e
}

// eventually polls cond every 50ms for up to 10s: how soon a policy
// change reaches a running sidecar ("within a few seconds").
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 10s", what)
}

func mustKey(t *testing.T, s string) keyspace.Key {
	t.Helper()
	k, err := keyspace.ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
