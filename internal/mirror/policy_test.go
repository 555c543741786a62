package mirror

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/keyspace"
)

// TestLockPolicyCommand: LockPolicy objects govern running sidecars
// through the controller (`baton mirror`, which writes them into etcd): a
// ServiceAccount the policy does not allow gets 403 on a key outside its
// prefixes and on force release, and nothing is written to etcd; an
// allowed one succeeds; changing or deleting the policy takes effect in
// the running sidecars within seconds; each LockPolicy says in its status
// whether it is in force; the API server refuses a malformed one.
func TestLockPolicyCommand(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	kc := kube(t)
	ns := namespace(t, kc, "team-a") // the example's
	layout, _ := keyspace.NewLayout(ns)
	cli, _ := testEtcd.Client(t)
	m := startMirrorProc(t, ns)
	runner := startSidecarProc(t, ns, "pod-runner", "--service-account", "pipeline-runner")
	web := startSidecarProc(t, ns, "pod-web", "--service-account", "web")

	// No LockPolicy: any key, no force release over the socket.
	expectCall(t, web, "POST", "/v1/locks/tenant-a/nightly", `{"owner":"w","ttl":"1m"}`, http.StatusOK, "")
	expectCall(t, runner, "DELETE", "/v1/locks/tenant-a/nightly?force=true", "", http.StatusForbidden, lockapi.CodeForbidden)
	expectCall(t, web, "DELETE", "/v1/locks/tenant-a/nightly?owner=w", "", http.StatusOK, "")

	pol := examplePolicy(t)
	kubectl(t, "apply", "-f", "../../examples/k8s/lockpolicy.yaml") // as docs/kubernetes.md does
	within(t, 20*time.Second, "the policy in force in the web sidecar", func() bool {
		// A key of its own: acquires that pass before the policy arrives
		// hold it.
		code, _ := web.call(t, "POST", "/v1/locks/tenant-poll", `{"owner":"w"}`)
		return code == http.StatusForbidden
	})
	e := expectCall(t, web, "POST", "/v1/locks/tenant-a/nightly", `{"owner":"w"}`, http.StatusForbidden, lockapi.CodeForbidden)
	if !strings.Contains(e.Message, "pipelines") || !strings.Contains(e.Message, `"web"`) {
		t.Errorf("the refusal %q does not name the policy and the ServiceAccount", e.Message)
	}
	if r, err := cli.Get(ctx, layout.LockPrefix(key(t, "tenant-a/nightly")), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 0 {
		t.Errorf("a refused acquire wrote keys: %v %v", r, err)
	}
	expectCall(t, web, "POST", "/v1/locks/shared/cache", `{"owner":"w","ttl":"1m"}`, http.StatusOK, "")
	expectCall(t, web, "DELETE", "/v1/locks/shared/cache?force=true", "", http.StatusForbidden, lockapi.CodeForbidden)
	expectCall(t, runner, "POST", "/v1/locks/tenant-a/nightly", `{"owner":"r","ttl":"1m"}`, http.StatusOK, "")
	expectCall(t, runner, "DELETE", "/v1/locks/shared/cache?force=true", "", http.StatusForbidden, lockapi.CodeForbidden)
	within(t, 20*time.Second, "the Applied condition", func() bool {
		var got batonv1.LockPolicy
		if err := kc.Get(ctx, client.ObjectKeyFromObject(pol), &got); err != nil {
			return false
		}
		c := meta.FindStatusCondition(got.Status.Conditions, batonv1.ConditionApplied)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, layout.Policy()) && got.Status.ObservedGeneration == got.Generation
	})
	if out := kubectl(t, "get", "lockpolicies", "-n", ns); !strings.Contains(out, "APPLIED") || !strings.Contains(out, "pipelines   True") {
		t.Errorf("kubectl get lockpolicies:\n%s", out)
	}

	// A change: the runner may force release shared/ too.
	if err := kc.Get(ctx, client.ObjectKeyFromObject(pol), pol); err != nil {
		t.Fatal(err)
	}
	pol.Spec.Rules[0].Keys = append(pol.Spec.Rules[0].Keys, "shared/")
	if err := kc.Update(ctx, pol); err != nil {
		t.Fatal(err)
	}
	within(t, 20*time.Second, "the changed policy in force", func() bool {
		code, _ := runner.call(t, "DELETE", "/v1/locks/shared/cache?force=true&by=oncall", "")
		return code == http.StatusOK
	})

	// Malformed rules never reach a sidecar: the API server refuses them.
	bad := &batonv1.LockPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"}, Spec: batonv1.LockPolicySpec{Rules: []batonv1.LockPolicyRule{
		{ServiceAccounts: []string{"Not A Name"}, Keys: []string{"a b"}},
	}}}
	if err := kc.Create(ctx, bad); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "serviceAccounts") {
		t.Errorf("a malformed LockPolicy: %v, want the API server's refusal", err)
	}

	// Deleted: the default again.
	if err := kc.Delete(ctx, pol); err != nil {
		t.Fatal(err)
	}
	within(t, 20*time.Second, "the default after the delete", func() bool {
		code, _ := web.call(t, "POST", "/v1/locks/tenant-b/other", `{"owner":"w"}`)
		return code == http.StatusOK
	})
	if r, err := cli.Get(ctx, layout.Policy()); err != nil || len(r.Kvs) != 0 {
		t.Errorf("the policy key after the last LockPolicy went: %v %v", r, err)
	}
	// Written, changed, deleted: counted.
	resp, err := http.Get(m.metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "baton_controller_policy_writes_total 3") {
		t.Errorf("the controller's metrics do not count 3 policy writes:\n%s", grepLines(string(body), "baton_controller"))
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// examplePolicy is the LockPolicy of examples/k8s/lockpolicy.yaml, which
// docs/kubernetes.md shows.
func examplePolicy(t *testing.T) *batonv1.LockPolicy {
	t.Helper()
	b, err := os.ReadFile("../../examples/k8s/lockpolicy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), string(b)) {
		t.Error("docs/kubernetes.md does not show examples/k8s/lockpolicy.yaml as it is")
	}
	var p batonv1.LockPolicy
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// expectCall makes a call and checks its status and, when code is not
// empty, its error code; it returns the error body.
func expectCall(t *testing.T, p *sidecarProc, method, path, body string, status int, code string) lockapi.Error {
	t.Helper()
	got, out := p.call(t, method, path, body)
	var e lockapi.Error
	_ = json.Unmarshal([]byte(out), &e)
	if got != status || (code != "" && e.Code != code) {
		t.Fatalf("%s %s: %d %s; want %d %s", method, path, got, out, status, code)
	}
	return e
}

// within polls cond every 50ms until it holds, for at most d.
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within %v", what, d)
}
