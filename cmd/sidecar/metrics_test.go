package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/baton-dev/baton/internal/version"
)

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// scrapeMetrics reads and parses a sidecar's /metrics on addr.
func scrapeMetrics(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value finds a sample of family name whose labels include want.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetrics scrapes /metrics of a real sidecar after grants, refusals, a
// wait that ran out, a release and an expiry, and parses it with the
// Prometheus text parser.
func TestMetrics(t *testing.T) {
	dir, err := os.MkdirTemp("", "baton-metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock, addr := filepath.Join(dir, "baton.sock"), freePort(t)
	serveInProcess(t, "--socket", sock, "--etcd-endpoints", strings.Join(testEtcd.Endpoints(), ","),
		"--scope", "metrics-test", "--health-addr", "", "--metrics-addr", addr, "--metrics-key-depth", "1",
		"--lease-ttl", "2s", "--request-timeout", "900ms")
	c := unixClient(sock)
	for _, step := range []struct {
		path, body string
		want       int
	}{
		{"/v1/locks/flow-1/plan", `{"owner":"a"}`, 200},
		{"/v1/locks/flow-1/plan", `{"owner":"b"}`, 409},
		{"/v1/locks/flow-1/plan", `{"owner":"b","wait":"100ms"}`, 409},
		{"/v1/locks/flow-2/plan", `{"owner":"c","ttl":"1s"}`, 200},
		{"/v1/locks/flow-3/plan", `{"owner":"d"}`, 200},
	} {
		if code := post(t, c, step.path, step.body); code != step.want {
			t.Fatalf("POST %s %s: %d, want %d", step.path, step.body, code, step.want)
		}
	}
	if code, body := do(t, c, "DELETE", "/v1/locks/flow-3/plan?owner=d", ""); code != 200 {
		t.Fatalf("release: %d %s", code, body)
	}
	scrape := func() map[string]*dto.MetricFamily { return scrapeMetrics(t, addr) }
	var fams map[string]*dto.MetricFamily
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) { // flow-2/plan expires
		fams = scrape()
		if v, _ := value(fams, "baton_locks_expired_total", map[string]string{"key": "flow-2"}); v == 1 || time.Now().After(deadline) {
			break
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   func(float64) bool
		desc   string
	}{
		{"baton_acquisitions_total", map[string]string{"result": "granted", "key": "flow-1"}, eq(1), "1"},
		{"baton_acquisitions_total", map[string]string{"result": "refused", "key": "flow-1"}, eq(1), "1"},
		{"baton_acquisitions_total", map[string]string{"result": "wait_timeout", "key": "flow-1"}, eq(1), "1"},
		{"baton_wait_duration_seconds", map[string]string{"key": "flow-1"}, eq(1), "1 observation"},
		{"baton_locks_held", map[string]string{"key": "flow-1"}, eq(1), "1"},
		{"baton_locks_held", map[string]string{"key": "flow-2"}, eq(0), "0"},
		{"baton_locks_expired_total", map[string]string{"key": "flow-2"}, eq(1), "1"},
		{"baton_locks_lost_total", map[string]string{"reason": "expired", "key": "flow-2"}, eq(1), "1"},
		{"baton_hold_duration_seconds", map[string]string{"key": "flow-3"}, eq(1), "1 observation"},
		{"baton_etcd_request_duration_seconds", map[string]string{"op": "Txn"}, func(v float64) bool { return v >= 4 }, ">= 4 transactions"},
		{"baton_etcd_request_duration_seconds", map[string]string{"op": "LeaseGrant"}, func(v float64) bool { return v >= 1 }, ">= 1 grant"},
		{"baton_session_lost_total", nil, eq(0), "0"},
		// flow-1/plan, held for its default ttl (5m) since a few seconds;
		// flow-2/plan expired and flow-3/plan was released: no series.
		{"baton_lock_ttl_used_ratio", map[string]string{"key": "flow-1"}, func(v float64) bool { return v > 0 && v < 0.2 }, "a little above 0"},
		{"baton_lock_oldest_held_seconds", map[string]string{"key": "flow-1"}, func(v float64) bool { return v > 0 && v < 60 }, "the seconds since its grant"},
		{"baton_ready", nil, eq(1), "1"},
		{"baton_build_info", map[string]string{"version": version.Get().Version, "commit": version.Get().Commit, "go_version": runtime.Version(), "etcd_version": version.Get().Etcd}, eq(1), "1"},
	} {
		v, ok := value(fams, c.name, c.labels)
		if !ok || !c.want(v) {
			t.Errorf("%s%v = %v (found %v), want %s", c.name, c.labels, v, ok, c.desc)
		}
	}
	for _, gone := range []string{"flow-2", "flow-3"} {
		if v, ok := value(fams, "baton_lock_ttl_used_ratio", map[string]string{"key": gone}); ok {
			t.Errorf("baton_lock_ttl_used_ratio{key=%q} = %v for a lock no longer held", gone, v)
		}
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

// TestPprofOnMetricsAddr: --pprof serves Go's profiles beside /metrics, and
// only with it.
func TestPprofOnMetricsAddr(t *testing.T) {
	for _, pprof := range []bool{true, false} {
		dir := t.TempDir()
		addr := freePort(t)
		args := []string{"--socket", filepath.Join(dir, "baton.sock"), "--etcd-endpoints", strings.Join(testEtcd.Endpoints(), ","),
			"--scope", "pprof-test", "--health-addr", "", "--metrics-addr", addr, "--lease-ttl", "2s", "--request-timeout", "900ms"}
		if pprof {
			args = append(args, "--pprof")
		}
		serveInProcess(t, args...)
		resp, err := http.Get("http://" + addr + "/debug/pprof/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 200, false: 404}[pprof]; resp.StatusCode != want {
			t.Errorf("--pprof=%v: GET /debug/pprof/ = %d, want %d", pprof, resp.StatusCode, want)
		}
	}
}
