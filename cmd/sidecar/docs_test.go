package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
)

// TestGuideClients runs the curl, Python, Node and Go clients that the
// user guide shows against a real sidecar: once on a free lock (granted,
// then released by closing the connection) and once on a held one (the
// webhook pattern: 409 with the running execution's id). It also checks
// the guide shows each file as it is. A missing interpreter fails the test.
func TestGuideClients(t *testing.T) {
	guide, err := os.ReadFile("../../docs/user-guide.md")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "baton-docs")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "baton.sock")
	serveInProcess(t, "--socket", sock, "--data-dir", filepath.Join(dir, "etcd"),
		"--embedded-client-url", "http://127.0.0.1:0", "--health-addr", "")
	c := unixClient(sock)

	for _, cl := range []struct {
		file, key string
		cmd       []string
	}{
		{"hold.sh", "nightly/report", []string{"bash", "hold.sh"}},
		{"client.py", "flow-123/readiness", []string{"python3", "client.py"}},
		{"client.js", "tenant-acme/gcp_billing_export", []string{"node", "client.js"}},
		{"go/main.go", "terraform-prod", []string{"go", "run", "./go"}},
		{"golock/main.go", "tenant-acme/invoice-run", []string{"go", "run", "./golock"}},
	} {
		t.Run(cl.file, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("../../examples/clients", cl.file))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(guide), string(src)) {
				t.Errorf("docs/user-guide.md does not show examples/clients/%s as it is", cl.file)
			}
			if _, err := exec.LookPath(cl.cmd[0]); err != nil {
				t.Fatalf("%s is needed to test the user guide's client: %v", cl.cmd[0], err)
			}
			runClient := func() string {
				t.Helper()
				cmd := exec.Command(cl.cmd[0], cl.cmd[1:]...)
				cmd.Dir = "../../examples/clients"
				cmd.Env = append(os.Environ(), "BATON_SOCKET="+sock)
				got, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%v: %v\n%s", cl.cmd, err, got)
				}
				return string(got)
			}

			got := runClient()
			if !strings.Contains(got, "with fence") || !strings.Contains(got, "released") {
				t.Errorf("on a free lock %v printed %q; want a grant with its fence and a release", cl.cmd, got)
			}
			waitStatus(t, c, cl.key, `"held":false`)

			if code, body := do(t, c, http.MethodPost, "/v1/locks/"+cl.key, `{"owner":"exec-running"}`); code != 200 {
				t.Fatalf("hold the lock: %d %s", code, body)
			}
			got = runClient()
			if !strings.Contains(got, "409") || !strings.Contains(got, `"running_execution_id":"exec-running"`) {
				t.Errorf("on a held lock %v printed %q; want 409 with the running execution id", cl.cmd, got)
			}
			do(t, c, http.MethodDelete, "/v1/locks/"+cl.key+"?owner=exec-running", "")

			// No sidecar there: the client says which socket it tried.
			none := filepath.Join(dir, "none.sock")
			cmd := exec.Command(cl.cmd[0], cl.cmd[1:]...)
			cmd.Dir = "../../examples/clients"
			cmd.Env = append(os.Environ(), "BATON_SOCKET="+none)
			got2, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(got2), none) || !strings.Contains(string(got2), "BATON_SOCKET") {
				t.Errorf("with no sidecar %v: %v, printed %q; want a failure naming %s and BATON_SOCKET", cl.cmd, err, got2, none)
			}
		})
	}
}

// TestDocsLinks: every relative link of README.md and docs/ leads to a
// file of the repository, and every #anchor to a heading of its page (as
// GitHub names them); every page of docs/ is linked from the README.
func TestDocsLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(pages) < 7 {
		t.Fatalf("docs/*.md: %v %v", pages, err)
	}
	readme := filepath.Join(root, "README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range append([]string{readme}, pages...) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(withoutCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			to := page
			if file != "" {
				to = filepath.Join(filepath.Dir(page), file)
			}
			if _, err := os.Stat(to); err != nil {
				t.Errorf("%s links to %s: %v", page, target, err)
				continue
			}
			if anchor != "" && !slices.Contains(anchors(t, to), anchor) {
				t.Errorf("%s links to %s: %s has no heading #%s", page, target, to, anchor)
			}
		}
	}
	b, _ := os.ReadFile(readme)
	for _, page := range pages {
		if !strings.Contains(string(b), "](docs/"+filepath.Base(page)+")") {
			t.Errorf("README links no docs/%s", filepath.Base(page))
		}
	}
}

// withoutCode is markdown without its fenced code blocks.
func withoutCode(md string) string {
	var out []string
	fenced := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// anchors are the anchors GitHub gives the headings of the page at path:
// lower case, punctuation but - and _ dropped, spaces as dashes.
func anchors(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(withoutCode(string(b)), "\n") {
		h, ok := strings.CutPrefix(l, "#")
		if !ok {
			continue
		}
		h = strings.ToLower(strings.TrimSpace(strings.TrimLeft(h, "#")))
		out = append(out, strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				return r
			}
			return -1
		}, h))
	}
	return out
}

// TestRunbookRenewsTheLock: the BatonLockNearTTL runbook's command, run as
// written by the lock's owner, renews the lock (a later deadline, the same
// fence) and takes no other lock; the alert's own description names the
// same call.
func TestRunbookRenewsTheLock(t *testing.T) {
	ops, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(ops)[strings.Index(string(ops), "### BatonLockNearTTL"):]
	section = section[:strings.Index(section[4:], "\n### ")+4]
	blocks := shellBlocks(section)
	if len(blocks) != 1 {
		t.Fatalf("the BatonLockNearTTL runbook shows %d shell blocks, want its extend call", len(blocks))
	}
	sb := newSandbox(t)
	c := sb.c
	sb.do(t, http.MethodPost, "/v1/locks/nightly/report", `{"owner":"exec-7","ttl":"1m"}`)
	before := sb.do(t, http.MethodGet, "/v1/locks/nightly/report", "")

	cmd := exec.Command("bash", "-euo", "pipefail", "-c", blocks[0])
	cmd.Env = append(sb.env, "KEY=nightly/report", "OWNER=exec-7")
	out, err := cmd.CombinedOutput()
	var g struct {
		Granted   bool      `json:"granted"`
		Key       string    `json:"key"`
		Fence     int64     `json:"fence"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err != nil || json.Unmarshal(out, &g) != nil || !g.Granted || g.Key != "nightly/report" || time.Until(g.ExpiresAt) < 29*time.Minute {
		t.Fatalf("the runbook's extend: %v, %s; want the lock renewed for 30m", err, out)
	}
	var st struct {
		Fence     int64     `json:"fence"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	_, after := do(t, c, http.MethodGet, "/v1/locks/nightly/report", "")
	if json.Unmarshal([]byte(after), &st) != nil || st.Fence != g.Fence || !st.ExpiresAt.Equal(g.ExpiresAt) {
		t.Errorf("status after the extend: %s (before: %s); want the same fence and the new deadline", after, before)
	}
	if _, list := do(t, c, http.MethodGet, "/v1/locks?prefix=nightly/", ""); strings.Count(list, `"key":`) != 1 {
		t.Errorf("locks after the extend: %s; want nightly/report alone", list)
	}

	// The alert's description names the same call.
	alerts, err := os.ReadFile("../../charts/baton/files/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`POST (/v1/locks/KEY:\w+)`).FindStringSubmatch(string(alerts))
	if m == nil {
		t.Fatal("BatonLockNearTTL's description names no POST /v1/locks/KEY:method")
	}
	path := strings.Replace(m[1], "KEY", "nightly/report", 1)
	if code, body := do(t, c, http.MethodPost, path, `{"owner":"exec-7","ttl":"5m"}`); code != 200 || !strings.Contains(body, `"granted":true`) {
		t.Errorf("the alert's %s: %d %s", m[1], code, body)
	}
}

// shellBlocks returns the ```sh blocks of a Markdown text.
func shellBlocks(md string) []string {
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(md, -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}
