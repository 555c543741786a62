package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// alert is one of Prometheus's alerts, as /api/v1/alerts lists it.
type alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// prometheusBin finds Prometheus's server, which make test installs.
func prometheusBin(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus (make test installs Debian's package): %v", err)
	}
	return bin
}

// controllerPrometheus runs Prometheus (bin) on this host with Baton's alerts
// (charts/baton/files/alerts.yaml), scraping the controller's pods at
// their addresses every second, labelled with their namespace and pod as
// the chart's ServiceMonitor would, and returns a function that lists its
// alerts. It runs until the test ends.
func controllerPrometheus(t *testing.T, bin string) func() []alert {
	t.Helper()
	pods, err := node.Client.CoreV1().Pods(system).List(context.Background(), metav1.ListOptions{
		LabelSelector: labels.Set{"app.kubernetes.io/component": "controller"}.String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rules, err := filepath.Abs(filepath.Join(root, "charts", "baton", "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - %s\nscrape_configs:\n  - job_name: controller\n    static_configs:\n", rules)
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			fmt.Fprintf(&cfg, "      - targets: [%q]\n        labels: {namespace: %s, pod: %s}\n", net.JoinHostPort(p.Status.PodIP, "8080"), system, p.Name)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var out bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus:\n%s", out.String())
		}
	})
	list := func() ([]alert, error) {
		resp, err := http.Get("http://" + addr + "/api/v1/alerts")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET /api/v1/alerts: %s", resp.Status)
		}
		var r struct {
			Data struct {
				Alerts []alert `json:"alerts"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return nil, err
		}
		return r.Data.Alerts, nil
	}
	eventually(t, time.Minute, "Prometheus on this host serving", func() error {
		_, err := list()
		return err
	})
	return func() []alert {
		alerts, err := list()
		if err != nil {
			t.Fatalf("Prometheus's alerts: %v", err)
		}
		return alerts
	}
}

// firing returns an error unless an alert named name fires with the
// labels want among alerts.
func firing(alerts []alert, name string, want map[string]string) error {
	for _, a := range alerts {
		if a.Labels["alertname"] != name || a.State != "firing" {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && a.Labels[k] == v
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("%s %v not firing: %+v", name, want, alerts)
}
