package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/baton-dev/baton/internal/embedetcd"
	"github.com/baton-dev/baton/internal/etcdmaint"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
	"github.com/baton-dev/baton/internal/testing/kubetest"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.MainWithoutEtcd(m)) }

// TestLeaderKeepsEtcd: a controller with Maintain, against a real
// kube-apiserver, finds the etcd out of space (its quota filled with
// history) and makes room by itself: the NOSPACE alarm is disarmed, writes
// are taken again, and its metrics count the defragmentation.
func TestLeaderKeepsEtcd(t *testing.T) {
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd")}, ErrorIfCRDPathMissing: true}
	kcfg, err := kubetest.Start(env, filepath.Join("..", ".."))
	if err != nil {
		t.Skip(kubetest.Unavailable("controller tests: no kube-apiserver", err))
	}
	t.Cleanup(func() { env.Stop() })
	srv, err := etcdtest.StartWith(func(c *embedetcd.Config) { c.Quota = 4 << 20; c.History = time.Hour })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cli, _ := srv.Client(t)
	ctx := context.Background()
	v := strings.Repeat("x", 16<<10)
	for i := 0; ; i++ {
		_, err := cli.Put(ctx, fmt.Sprintf("/fill/%d", i%20), v)
		if errors.Is(err, rpctypes.ErrNoSpace) {
			break
		}
		if err != nil || i > 5000 {
			t.Fatalf("filling etcd: %d puts: %v", i, err)
		}
	}

	cfg := Default()
	cfg.LeaderElection, cfg.HealthAddr, cfg.MetricsAddr, cfg.Fences = false, "", "", nil
	m := etcdmaint.Default()
	m.Interval = 200 * time.Millisecond
	cfg.Maintain = &m
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(runCtx, kcfg, cli, cfg, logr.Discard()) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		alarms, err := cli.AlarmList(ctx)
		if err == nil && len(alarms.Alarms) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the NOSPACE alarm is still raised after 30s: %+v %v", alarms, err)
		}
	}
	if _, err := cli.Put(ctx, "/after", "x"); err != nil {
		t.Fatalf("write after the controller made room: %v", err)
	}
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var defrags float64
	for _, f := range families {
		if f.GetName() != "baton_etcd_defragmentations_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == string(etcdmaint.NoSpace) {
					defrags += s.GetCounter().GetValue()
				}
			}
		}
	}
	if defrags < 1 {
		t.Errorf("baton_etcd_defragmentations_total{reason=no_space} = %v on the controller's metrics, want the defragmentation counted", defrags)
	}
}
