package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docBlock is a shell block of a page of the docs, as written.
type docBlock struct {
	page string // relative to the repository's root
	line int    // of the opening fence
	text string
}

func (b docBlock) String() string { return fmt.Sprintf("%s:%d", b.page, b.line) }

// docBlocks reads every shell block (sh, bash, console, shell) of README.md
// and docs/*.md.
func docBlocks(t *testing.T) []docBlock {
	t.Helper()
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docBlock
	fence := regexp.MustCompile("^ *```(sh|bash|console|shell)$") // indented in a list too
	for _, page := range append([]string{"../../README.md"}, pages...) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for i := 0; i < len(lines); i++ {
			if !fence.MatchString(lines[i]) {
				continue
			}
			start := i
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			}
			blocks = append(blocks, docBlock{page: strings.TrimPrefix(page, "../../"), line: start + 1,
				text: strings.Join(lines[start+1:min(i, len(lines))], "\n") + "\n"})
		}
	}
	return blocks
}

// docRunners says, for every shell block of the docs, which test runs it
// as written, by a line of the block: "session" for TestDocSessions, which
// runs it here against a real sidecar; else the name of the test that does
// (with the package it lives in). A block that no entry names fails
// TestEveryDocBlockIsRun, and so does an entry that names no block.
var docRunners = map[string]string{
	"make run    # builds bin/baton":                                                        "cmd/sidecar TestServeEmbedded (make run's serve; CI runs make test itself)",
	`$ S="curl -s --unix-socket ./baton.sock"`:                                              "session",
	`chat-42:hold -d '{"owner":"turn-7","wait":"1m"}'` + "\n" + `{"event":"granted"`:        "session",
	"$ bin/baton run --key nightly/report -- ./report.sh":                                   "session",
	`{"event":"queued","key":"chat-42"`:                                                     "session",
	"$ curl -sN --unix-socket ./baton.sock http://baton/v1/locks/leader:watch":              "session",
	"$ bin/baton serve --socket ./baton.sock --dapr-http-addr":                              "cmd/sidecar TestDaprDoc",
	"etcdctl lock /baton/v1/default/locks/terraform-prod":                                   "session",
	"# Hold a Baton lock while a phase runs, with curl alone.":                              "cmd/sidecar TestGuideClients",
	"$ pip install ./clients/python":                                                        "cmd/sidecar TestPythonClient",
	"$ npm install --no-save ./clients/node":                                                "cmd/sidecar TestNodeClient",
	"# postgres-write.sh FENCE BODY":                                                        "cmd/sidecar TestFencingRecipes",
	"# etcd-write.sh FENCE BODY":                                                            "cmd/sidecar TestFencingRecipes",
	"# kube-write.sh FENCE BODY":                                                            "cmd/sidecar TestFencingRecipes",
	"# file-write.sh FENCE BODY":                                                            "cmd/sidecar TestFencingRecipes",
	"baton run --socket ./baton.sock --key flow-123/readiness --wait 30s":                   "session",
	`$ curl -s --unix-socket ./baton.sock -X POST http://baton/v1/locks/tenant-a/pipelines`: "session",
	"$ baton run --socket ./baton.sock --key catalog --mode read":                           "session",
	"$ baton run --socket ./baton.sock --key payments/batch --lock-delay 30s":               "session",
	"$ baton run --socket ./baton.sock --once migrate/v42 -- ./migrate.sh      # the first": "session",
	"$ baton locks watch leader --socket ./baton.sock":                                      "session",
	"$ baton elect scheduler --socket ./baton.sock":                                         "cmd/sidecar TestElectDoc",
	"$ baton locks list --socket ./baton.sock":                                              "session",
	`curl -s --unix-socket "$BATON_SOCKET" -X POST "http://baton/v1/locks/$KEY:extend"`:     "cmd/sidecar TestRunbookRenewsTheLock",
	// docs/kubernetes.md's, on the test node (test/node's docShell runs
	// them as written, in one terminal per test).
	"$ export PATH=$PWD/bin:$PWD/bin/k8s:$PATH":                          "test/node TestBatonOnANode (the install and the example)",
	"$ make cluster\n":                                                   "test/node TestBatonOnANode (its TestMain makes the node, the test installs with this bin/helm line, make cluster-down ends it)",
	"$ helm uninstall baton -n baton-system --cascade foreground --wait": "test/node TestBatonOnANode (the uninstall's first two commands, then all before the proxy's install)",
	"$ kubectl -n baton-system get daemonset baton-etcd-proxy":           "test/node TestBatonOnANode (etcd's gRPC proxy)",
	"$ kubectl apply -f config/crd -f config/rbac":                       "test/node TestMirrorByHand",
	// docs/operations.md's, on the test node too.
	"$ kubectl -n baton-system delete pvc data-baton-etcd-1 --wait=false":                        "test/node TestBatonOnANode (an etcd member that lost its volume)",
	"$ kubectl -n baton-system exec baton-etcd-backup-0 -- /baton-controller etcd-backup --once": "test/node TestBatonOnANode (etcd's backups)",
	"$ kubectl -n baton-system scale statefulset baton-etcd baton-etcd-backup --replicas=0":      "test/node TestBatonOnANode (etcd restored from a backup)",
	"$ kubectl -n baton-system get pods -l app.kubernetes.io/component=etcd-backup":              "test/node TestBatonOnANode (etcd's backups: BatonEtcdBackupMissing's runbook)",
	"$ kubectl annotate lock -n team-a deploy-prod-1a7b4df2":                                     "test/node TestMirrorByHand",
	"--cluster-name west":                             "test/node TestMirrorByHand",
	"$ kubectl apply -f examples/k8s/lockpolicy.yaml": "test/node TestMirrorByHand",
}

// runnerOf returns the entry of docRunners that names b, and how many do.
func runnerOf(b docBlock) (key, runner string, n int) {
	for k, r := range docRunners {
		if strings.Contains(b.text, k) {
			key, runner, n = k, r, n+1
		}
	}
	return key, runner, n
}

// TestEveryDocBlockIsRun: every shell block of README.md and docs/ is run
// as written by a test: by TestDocSessions here, or by the test its
// docRunners entry names, which must exist (docs/kubernetes.md's by
// test/node, on a real node).
func TestEveryDocBlockIsRun(t *testing.T) {
	used := map[string]bool{}
	for _, b := range docBlocks(t) {
		key, runner, n := runnerOf(b)
		switch {
		case n == 0:
			t.Errorf("%s: a shell block that no test runs: run it in a test and name that test in docRunners\n%s", b, b.text)
			continue
		case n > 1:
			t.Errorf("%s: more than one docRunners entry names this block", b)
		}
		used[key] = true
		if runner == "session" {
			continue
		}
		pkg, name, _ := strings.Cut(runner, " ")
		name, _, _ = strings.Cut(name, " ")
		if !testExists(t, filepath.Join("../..", pkg), name) {
			t.Errorf("%s: docRunners names %s in %s, which has no such test", b, name, pkg)
		}
	}
	for k := range docRunners {
		if !used[k] {
			t.Errorf("docRunners entry %q names no block of the docs", k)
		}
	}
}

// testExists reports whether a _test.go file of dir declares func name.
func testExists(t *testing.T, dir, name string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "func "+name+"(t *testing.T)") {
			return true
		}
	}
	return false
}
