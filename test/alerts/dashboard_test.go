package alerts

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const dashboardFile = root + "/charts/baton/files/dashboard.json"

// dashboard is what the tests read of files/dashboard.json.
type dashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		Title       string `json:"title"`
		Description string `json:"description"`
		Datasource  struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
}

// panelQuery is a dashboard panel's query as Prometheus takes it.
type panelQuery struct{ panel, expr string }

// dashboardQueries reads the dashboard's panels' queries, with Grafana's
// variables replaced as Grafana would for every namespace over 1m.
func dashboardQueries(t *testing.T) (dashboard, []panelQuery) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	grafana := strings.NewReplacer("$__rate_interval", "1m", "$namespace", ".*")
	var qs []panelQuery
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			qs = append(qs, panelQuery{p.Title, grafana.Replace(tg.Expr)})
		}
	}
	return d, qs
}

// TestDashboardQueriesParse: every panel has a title, a description, the
// dashboard's data source and queries, and each query parses with
// Prometheus's own parser (promtool checks them as recording rules).
func TestDashboardQueriesParse(t *testing.T) {
	d, qs := dashboardQueries(t)
	if d.Title != "Baton" || d.UID != "baton" || len(d.Panels) < 10 {
		t.Fatalf("dashboard %q (uid %q) with %d panels", d.Title, d.UID, len(d.Panels))
	}
	for _, p := range d.Panels {
		if p.Title == "" || p.Description == "" || len(p.Targets) == 0 || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: description %q, %d queries, data source %q", p.Title, p.Description, len(p.Targets), p.Datasource.UID)
		}
	}
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for i, q := range qs {
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: q.expr})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out := promtool(t, "check", "rules", file); !strings.Contains(out, fmt.Sprintf("SUCCESS: %d rules found", len(qs))) {
		t.Errorf("promtool check rules on the dashboard's queries: %s", out)
	}
}
