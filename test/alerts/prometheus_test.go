package alerts

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clientv3 "go.etcd.io/etcd/client/v3"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/baton-dev/baton/internal/controller"
	"github.com/baton-dev/baton/internal/embedetcd"
	"github.com/baton-dev/baton/internal/etcdmaint"
	"github.com/baton-dev/baton/internal/pki"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
	"github.com/baton-dev/baton/internal/testing/kubetest"
	"github.com/baton-dev/baton/internal/webhook"
)

// TestWithPrometheus runs a real Prometheus (Debian's package, $PROMETHEUS
// or prometheus on $PATH) on loopback with the alerts, scraping two real
// sidecars, the controller (which keeps the etcd) and etcd's own metrics
// while a workload runs: every query of the
// dashboard returns data, every alert's expression evaluates, every metric
// they read is one the processes export, and BatonLockNearTTL fires for a
// lock held past 80% of its ttl.
func TestWithPrometheus(t *testing.T) {
	prom := prometheusBin(t)
	// On TCP, so that Prometheus scrapes its own metrics (on its client
	// URL), as it does the chart's etcd's (job baton-etcd).
	etcdAddr := freeAddr(t)
	etcd, err := etcdtest.StartWith(func(c *embedetcd.Config) { c.ClientURL = "http://" + etcdAddr })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	var sidecars []sidecar
	for _, pod := range []string{"report-a", "report-b"} {
		sidecars = append(sidecars, startSidecar(t, pod, etcd.Endpoints()))
	}
	ctlAddr := startController(t, ctx, etcd.Endpoints())
	backupAddr := startBackups(t, etcd.Endpoints())
	promAddr := startPrometheus(t, prom, sidecars, map[string]string{"controller": ctlAddr, "baton-etcd": etcdAddr, "baton-etcd-backup": backupAddr})
	workload(t, ctx, sidecars)

	// A lock held with a ttl of 20s runs past 80% of it 16s later; the
	// alert has 4s (4 scrapes and evaluations) to fire before it expires.
	// The clock starts before the acquire: the grant comes after it,
	// however long the answer takes on a loaded machine.
	start := time.Now()
	if code, body := sidecars[0].call(t, "POST", "/v1/locks/nightly/report", `{"owner":"slow","ttl":"20s"}`); code != 200 {
		t.Fatalf("acquire: %d %s", code, body)
	}
	waitFor(t, 30*time.Second, "BatonLockNearTTL firing for report-a", func() error {
		var alerts struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		}
		promGet(t, promAddr, "/api/v1/alerts", nil, &alerts)
		for _, a := range alerts.Alerts {
			if a.Labels["alertname"] == "BatonLockNearTTL" && a.Labels["pod"] == "report-a" && a.State == "firing" {
				return nil
			}
		}
		return fmt.Errorf("alerts: %+v", alerts.Alerts)
	})
	if since := time.Since(start); since < 16*time.Second {
		t.Errorf("BatonLockNearTTL fired %v after the grant, before 80%% of the 20s ttl", since)
	}
	t.Logf("BatonLockNearTTL fired %v after the grant of a lock with a 20s ttl", time.Since(start).Round(100*time.Millisecond))

	exported := map[string]bool{}
	var names []string
	promGet(t, promAddr, "/api/v1/label/__name__/values", nil, &names)
	for _, n := range names {
		exported[n] = true
	}
	_, panels := dashboardQueries(t)
	for _, q := range panels {
		var res struct {
			Result []json.RawMessage `json:"result"`
		}
		promGet(t, promAddr, "/api/v1/query", url.Values{"query": {q.expr}}, &res)
		if len(res.Result) == 0 {
			t.Errorf("panel %q: %s returned no data", q.panel, q.expr)
		}
	}
	var rules ruleFile
	load(t, rulesFile, &rules)
	var exprs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
			var res struct {
				Result []json.RawMessage `json:"result"`
			}
			promGet(t, promAddr, "/api/v1/query", url.Values{"query": {r.Expr}}, &res) // fails on an error
			// The backups, scraped and written an instant ago, are not
			// missing: its job and series are the ones it selects.
			if r.Alert == "BatonEtcdBackupMissing" && len(res.Result) != 0 {
				t.Errorf("BatonEtcdBackupMissing's expression holds with a backup just written: %s", res.Result)
			}
		}
	}
	for _, q := range panels {
		exprs = append(exprs, q.expr)
	}
	for i, selected := range metricNames(t, exprs) {
		for _, n := range selected {
			if !exported[n] {
				t.Errorf("%s reads %s, which none of the sidecars, the controller, etcd and the backups export", exprs[i], n)
			}
		}
	}
}

// prometheusBin finds the Prometheus server.
func prometheusBin(t *testing.T) string {
	t.Helper()
	if batonBin == "" {
		t.Skip("no sidecar binary")
	}
	bin := os.Getenv("PROMETHEUS")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("prometheus"); err != nil {
			t.Skip(kubetest.Unavailable("prometheus (make test installs Debian's package)", err))
		}
	}
	return bin
}

// sidecar is a real sidecar process and how to reach it.
type sidecar struct {
	pod, socket, metrics string
}

// call calls the sidecar's socket API, failing the test if it cannot.
func (s sidecar) call(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	code, b, err := s.try(method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, b
}

// try calls the sidecar's socket API.
func (s sidecar) try(method, path, body string) (int, string, error) {
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", s.socket)
		},
	}}
	req, err := http.NewRequest(method, "http://baton"+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func startSidecar(t *testing.T, pod string, endpoints []string) sidecar {
	t.Helper()
	dir := t.TempDir()
	s := sidecar{pod: pod, socket: filepath.Join(dir, "baton.sock"), metrics: freeAddr(t)}
	cmd := exec.Command(batonBin, "serve", "--socket", s.socket, "--scope", "shop", "--etcd-endpoints", strings.Join(endpoints, ","),
		"--health-addr", "", "--metrics-addr", s.metrics, "--lease-ttl", "3s", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "POD_NAME="+pod)
	startProcess(t, "sidecar "+pod, cmd)
	waitFor(t, 30*time.Second, "sidecar "+pod+" serving", func() error {
		_, err := os.Stat(s.socket)
		return err
	})
	return s
}

// startProcess starts cmd and, at the test's end, kills it, logging its
// output if the test failed.
func startProcess(t *testing.T, name string, cmd *exec.Cmd) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s:\n%s", name, out.String())
		}
	})
}

// startController runs the controller (the mirror, leader elected, and
// the injector) on a real kube-apiserver, and returns its metrics address.
func startController(t *testing.T, ctx context.Context, endpoints []string) string {
	t.Helper()
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd")}, ErrorIfCRDPathMissing: true}
	kcfg, err := kubetest.Start(env, root)
	if err != nil {
		t.Skip(kubetest.Unavailable("kube-apiserver", err))
	}
	t.Cleanup(func() { env.Stop() })
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	cfg := controller.Default()
	cfg.HealthAddr, cfg.MetricsAddr = "", freeAddr(t)
	cfg.WebhookPort, cfg.WebhookCertDir = freePortOf(t), servingCert(t)
	inject := webhook.Default()
	// No pod is admitted here: the injector serves, and counts, only.
	inject.Image, inject.EtcdEndpoints = "baton:test", []string{"http://127.0.0.1:2379"}
	cfg.Inject = &inject
	// It keeps the test's etcd, as the chart's controller does its own.
	maint := etcdmaint.Default()
	maint.Interval = time.Second
	cfg.Maintain = &maint
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(ctx)
	go func() { done <- controller.Run(ctx, kcfg, cli, cfg, logr.Discard()) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
	return cfg.MetricsAddr
}

// servingCert writes a certificate for the injector's server on loopback.
func servingCert(t *testing.T) string {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA("alerts-test", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue(pki.Request{CommonName: "injector", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{"tls.crt": pair.CertPEM, "tls.key": pair.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startBackups runs the chart's scheduled etcd backups, and returns their
// metrics address.
func startBackups(t *testing.T, endpoints []string) string {
	t.Helper()
	addr := freeAddr(t)
	startProcess(t, "etcd-backup", exec.Command(batonBin, "etcd-backup", "--etcd-endpoints", endpoints[0], "--dir", t.TempDir(), "--every", "1h", "--metrics-addr", addr))
	return addr
}

// startPrometheus runs Prometheus with the alerts, scraping the sidecars
// (labelled with their namespace and pod, as Kubernetes service discovery
// would) and the other processes by job (the controller, etcd, the
// backups) every second, and returns its address.
func startPrometheus(t *testing.T, bin string, sidecars []sidecar, jobs map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - %s\nscrape_configs:\n  - job_name: sidecars\n    static_configs:\n", rules)
	for _, s := range sidecars {
		fmt.Fprintf(&b, "      - targets: [%q]\n        labels: {namespace: shop, pod: %s}\n", s.metrics, s.pod)
	}
	for _, job := range slices.Sorted(maps.Keys(jobs)) {
		fmt.Fprintf(&b, "  - job_name: %s\n    static_configs:\n      - targets: [%q]\n        labels: {namespace: baton, pod: %s-0}\n", job, jobs[job], job)
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	startProcess(t, "prometheus", exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr))
	// Every target up.
	waitFor(t, 60*time.Second, "Prometheus scraping the sidecars, the controller, etcd and the backups", func() error {
		var res struct {
			Result []json.RawMessage `json:"result"`
		}
		if err := promTry(addr, "/api/v1/query", url.Values{"query": {"up == 1"}}, &res); err != nil {
			return err
		}
		if len(res.Result) != len(sidecars)+len(jobs) {
			return fmt.Errorf("%d of %d targets up", len(res.Result), len(sidecars)+len(jobs))
		}
		return nil
	})
	return addr
}

// workload has callers of both sidecars take turns at locks, wait, get
// refused, run out of waiting and let a lock expire, in the background
// until the test ends, after a first round of each.
func workload(t *testing.T, ctx context.Context, sidecars []sidecar) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	a, b := sidecars[0], sidecars[1]
	// A lock left to expire, a refusal, a wait that runs out, and one granted.
	steps := []struct {
		s                  sidecar
		method, path, body string
		want               int
	}{
		{a, "POST", "/v1/locks/expiring", `{"owner":"x","ttl":"1s"}`, 200},
		{a, "POST", "/v1/locks/flow/1", `{"owner":"a1","ttl":"1m"}`, 200},
		{b, "POST", "/v1/locks/flow/1", `{"owner":"b1"}`, 409},
		{b, "POST", "/v1/locks/flow/1", `{"owner":"b1","wait":"300ms"}`, 409},
		{a, "DELETE", "/v1/locks/flow/1?owner=a1", "", 200},
		{b, "POST", "/v1/locks/flow/1", `{"owner":"b1","wait":"5s"}`, 200},
		{b, "DELETE", "/v1/locks/flow/1?owner=b1", "", 200},
	}
	for _, st := range steps {
		if code, body := st.s.call(t, st.method, st.path, st.body); code != st.want {
			t.Fatalf("%s %s %s: %d %s, want %d", st.method, st.path, st.body, code, body, st.want)
		}
	}
	// An election: its leader on one sidecar, a candidate waiting on the
	// other, for as long as the test runs.
	for i, s := range sidecars {
		campaign(t, ctx, s, "scheduler", fmt.Sprintf("replica-%d", i))
	}
	// Then two callers taking turns at one lock, one on each sidecar,
	// with a wait each time: grants, waits and holds every second.
	var wg sync.WaitGroup
	for i, s := range sidecars {
		wg.Go(func() {
			owner := fmt.Sprintf("turns-%d", i)
			for ctx.Err() == nil {
				if code, _, err := s.try("POST", "/v1/locks/turns", `{"owner":"`+owner+`","wait":"10s","ttl":"1m"}`); err == nil && code == 200 {
					time.Sleep(100 * time.Millisecond)
					s.try("DELETE", "/v1/locks/turns?owner="+owner, "")
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	time.Sleep(3 * time.Second) // the expiry, and samples of every rate
}

// metricNames returns the metric names each expression selects, by
// Prometheus's own parser (bin/promql-names, or $PROMQL_NAMES).
func metricNames(t *testing.T, exprs []string) [][]string {
	t.Helper()
	bin := os.Getenv("PROMQL_NAMES")
	if bin == "" {
		bin = filepath.Join(root, "bin", "promql-names")
	}
	cmd := exec.Command(bin)
	cmd.Stdin = strings.NewReader(strings.Join(exprs, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("promql-names (make test builds it): %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(exprs) {
		t.Fatalf("promql-names answered %d lines for %d expressions", len(lines), len(exprs))
	}
	names := make([][]string, len(lines))
	for i, l := range lines {
		names[i] = strings.Fields(l)
		if len(names[i]) == 0 {
			t.Errorf("%s selects no metric", exprs[i])
		}
	}
	return names
}

// promGet calls Prometheus's HTTP API and decodes its data into out,
// failing the test on an error.
func promGet(t *testing.T, addr, path string, q url.Values, out any) {
	t.Helper()
	if err := promTry(addr, path, q, out); err != nil {
		t.Fatalf("%s %v: %v", path, q, err)
	}
}

func promTry(addr, path string, q url.Values, out any) error {
	resp, err := http.Get("http://" + addr + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return err
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s", env.Status, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	var last error
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if last = cond(); last == nil {
			return
		}
	}
	t.Fatalf("%s: not after %v: %v", what, d, last)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func freePortOf(t *testing.T) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(freeAddr(t))
	var p int
	fmt.Sscan(port, &p)
	return p
}

// campaign has owner campaign in election name on s until ctx ends, and
// returns once it leads or waits.
func campaign(t *testing.T, ctx context.Context, s sidecar, name, owner string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", s.socket)
	}}}
	req, err := http.NewRequestWithContext(ctx, "POST", "http://baton/v1/elections/"+name+":campaign", strings.NewReader(`{"owner":"`+owner+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, `"event":"granted"`) && !strings.Contains(line, `"event":"queued"`) {
		t.Fatalf("%s's campaign: %q %v", owner, line, err)
	}
}
