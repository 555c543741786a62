package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// TestPrometheusRule: with prometheusRule.enabled the chart installs the
// alerts of files/alerts.yaml as they are, but for BatonLockNearTTL's
// threshold, set by prometheusRule.ttlUsedRatio, and etcd's quorum, that
// of etcd.replicas, and with the labels Prometheus selects its rules by;
// without it, none. etcd's own alerts come with etcd.podMonitor only, the
// backups' with etcd.backup.podMonitor only.
func TestPrometheusRule(t *testing.T) {
	needCluster(t)
	if rules := find(renderObjects(t, ""), "PrometheusRule"); len(rules) != 0 {
		t.Errorf("%d PrometheusRules with the default values, want none", len(rules))
	}
	objs := find(renderObjects(t, filepath.Join("values", "cert-manager.yaml")), "PrometheusRule")
	if len(objs) != 1 {
		t.Fatalf("%d PrometheusRules, want one", len(objs))
	}
	var got monitoringv1.PrometheusRule
	strict(t, objs[0], &got)
	if got.Labels["release"] != "prometheus" {
		t.Errorf("labels %v, want release=prometheus", got.Labels)
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file monitoringv1.PrometheusRuleSpec
	if err := sigsyaml.UnmarshalStrict(b, &file); err != nil {
		t.Fatalf("files/alerts.yaml: %v", err)
	}
	manifest, err := render(t, filepath.Join("values", "cert-manager.yaml"), "--set", "etcd.podMonitor.enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	var unscraped monitoringv1.PrometheusRule
	strict(t, find(objects(t, manifest), "PrometheusRule")[0], &unscraped)
	if n := len(unscraped.Spec.Groups); n != len(file.Groups)-1 || slices.ContainsFunc(unscraped.Spec.Groups, func(g monitoringv1.RuleGroup) bool { return g.Name == "baton-etcd-members" }) {
		t.Errorf("without etcd.podMonitor: %d groups, want all but baton-etcd-members", n)
	}
	manifest, err = render(t, filepath.Join("values", "cert-manager.yaml"), "--set", "etcd.backup.podMonitor.enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	var noBackups monitoringv1.PrometheusRule
	strict(t, find(objects(t, manifest), "PrometheusRule")[0], &noBackups)
	if n := len(noBackups.Spec.Groups); n != len(file.Groups)-1 || slices.ContainsFunc(noBackups.Spec.Groups, func(g monitoringv1.RuleGroup) bool { return g.Name == "baton-etcd-backups" }) {
		t.Errorf("without etcd.backup.podMonitor: %d groups, want all but baton-etcd-backups", n)
	}
	if len(got.Spec.Groups) != len(file.Groups) {
		t.Fatalf("%d groups, files/alerts.yaml has %d", len(got.Spec.Groups), len(file.Groups))
	}
	for i, g := range file.Groups {
		rules := got.Spec.Groups[i].Rules
		if got.Spec.Groups[i].Name != g.Name || len(rules) != len(g.Rules) {
			t.Fatalf("group %d: %s with %d rules, want %s with %d", i, got.Spec.Groups[i].Name, len(rules), g.Name, len(g.Rules))
		}
		for j, want := range g.Rules {
			r := rules[j]
			wantExpr := want.Expr.String()
			switch want.Alert {
			case "BatonLockNearTTL":
				wantExpr = strings.Replace(wantExpr, "> 0.8", "> 0.9", 1)
			case "BatonEtcdInsufficientMembers": // a quorum of the chart's 3 members
				wantExpr = strings.Replace(wantExpr, `((count by (namespace) (up{job="baton-etcd"}) + 1) / 2)`, "2", 1)
			}
			if r.Alert != want.Alert || r.Expr.String() != wantExpr || r.For == nil != (want.For == nil) ||
				r.Annotations["summary"] != want.Annotations["summary"] || r.Labels["severity"] != want.Labels["severity"] {
				t.Errorf("rule %s: %+v, want %+v with expression %q", want.Alert, r, want, wantExpr)
			}
		}
	}
}

// TestGrafanaDashboard: with grafanaDashboard.enabled the chart installs
// files/dashboard.json as it is, in a ConfigMap that kube-prometheus-stack's
// Grafana sidecar loads (grafana_dashboard: "1"), in the namespace asked
// for; without it, none.
func TestGrafanaDashboard(t *testing.T) {
	needCluster(t)
	dashboards := func(objs []map[string]any) []corev1.ConfigMap {
		var out []corev1.ConfigMap
		for _, o := range find(objs, "ConfigMap") {
			var cm corev1.ConfigMap
			strict(t, o, &cm)
			if cm.Labels["grafana_dashboard"] != "" {
				out = append(out, cm)
			}
		}
		return out
	}
	if cms := dashboards(renderObjects(t, "")); len(cms) != 0 {
		t.Errorf("%d dashboards with the default values, want none", len(cms))
	}
	cms := dashboards(renderObjects(t, filepath.Join("values", "cert-manager.yaml")))
	if len(cms) != 1 {
		t.Fatalf("%d dashboard ConfigMaps, want one", len(cms))
	}
	cm := cms[0]
	if cm.Labels["grafana_dashboard"] != "1" || cm.Namespace != "monitoring" {
		t.Errorf("dashboard ConfigMap %s/%s labelled %v: want grafana_dashboard=1 in monitoring", cm.Namespace, cm.Name, cm.Labels)
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "files", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("files/dashboard.json: %v", err)
	}
	if err := json.Unmarshal([]byte(cm.Data["baton.json"]), &got); err != nil {
		t.Fatalf("the ConfigMap's baton.json: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Error("the ConfigMap's baton.json is not files/dashboard.json")
	}
}
