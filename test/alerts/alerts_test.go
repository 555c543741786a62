// Package alerts checks Baton's alerting rules (charts/baton/files/alerts.yaml)
// and Grafana dashboard (charts/baton/files/dashboard.json). With
// Prometheus's promtool (bin/promtool, or $PROMTOOL): the rules load, each
// alert's unit tests in rules_test.yaml pass, every alert is tested both
// firing and quiet, every alert's runbook is a section of
// docs/operations.md, and every dashboard query parses. With a real
// Prometheus server (Debian's package) scraping real sidecars, the
// controller and etcd: every dashboard query returns data, every alert evaluates,
// they read only metrics Baton exports (by Prometheus's parser,
// bin/promql-names), and BatonLockNearTTL fires.
package alerts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	root      = "../.."
	rulesFile = root + "/charts/baton/files/alerts.yaml"
	testsFile = "rules_test.yaml"
	runbooks  = root + "/docs/operations.md"
)

// promtool runs promtool with args and returns its output.
func promtool(t *testing.T, args ...string) string {
	t.Helper()
	bin := os.Getenv("PROMTOOL")
	if bin == "" {
		bin = filepath.Join(root, "bin", "promtool")
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// TestRulesLoad: promtool loads the rules file, every expression parsed.
func TestRulesLoad(t *testing.T) {
	out := promtool(t, "check", "rules", rulesFile)
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool check rules: %s", out)
	}
}

// TestRulesUnitTests: promtool test rules runs rules_test.yaml.
func TestRulesUnitTests(t *testing.T) {
	out := promtool(t, "test", "rules", testsFile)
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules: %s", out)
	}
}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

type testFile struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func load(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestEveryAlertTestedWithARunbook: each alert has a unit test where it
// fires and one where it stays quiet, a summary, a description, and a
// runbook_url pointing at a section of docs/operations.md.
func TestEveryAlertTestedWithARunbook(t *testing.T) {
	var rules ruleFile
	var tests testFile
	load(t, rulesFile, &rules)
	load(t, testsFile, &tests)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	doc, err := os.ReadFile(runbooks)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, h := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(doc), -1) {
		sections[anchor(h[1])] = true
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("%s: tested firing %v, quiet %v; want both", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: no summary or description", r.Alert)
			}
			const prefix = "https://github.com/baton-dev/baton/blob/main/docs/operations.md#"
			url := r.Annotations["runbook_url"]
			if !strings.HasPrefix(url, prefix) || !sections[strings.TrimPrefix(url, prefix)] {
				t.Errorf("%s: runbook_url %q is not a section of docs/operations.md", r.Alert, url)
			}
		}
	}
	if n < 7 {
		t.Errorf("%d alerts, want at least 7", n)
	}
}

// anchor is GitHub's anchor of a Markdown heading.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
