package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// churnBound is what the chart's etcd may hold, in use and on disk, under
// churn with a history of a minute: tens of MiB.
const churnBound = 64 << 20

// TestChartEtcdUnderChurn (make soak, BATON_SOAK=1): the chart installed
// with a history of one minute (etcd.history), and injected pods taking and
// letting go of locks as fast as baton run goes, for BATON_CHURN (8m).
// Each member's database, in use and on disk, stays under churnBound, and
// stops growing once the history has been compacted twice: the last third
// of the run holds no more than the middle third, give or take a quarter.
// It installs the release TestBatonOnANode does, in the same namespace:
// make soak runs it alone, on a node of its own.
func TestChartEtcdUnderChurn(t *testing.T) {
	if os.Getenv("BATON_SOAK") == "" {
		t.Skip("soak only: BATON_SOAK=1 (make soak)")
	}
	needNode(t)
	d := 8 * time.Minute
	if s := os.Getenv("BATON_CHURN"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d < 4*time.Minute {
			t.Fatalf("BATON_CHURN=%s: want a duration of 4m or more", s)
		}
	}
	ctx := context.Background()
	helm(t, "install", release, filepath.Join(root, "charts", "baton"), "--namespace", system, "--create-namespace",
		"--set", "etcd.history=1m", "--wait", "--timeout", "5m")
	t.Cleanup(func() { helm(t, "uninstall", release, "--namespace", system, "--wait") })
	cli := rootClient(t)
	if _, err := node.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "churn"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kubectl(t, "delete", "namespace", "churn", "--wait") })
	if _, err := node.Client.AppsV1().Deployments("churn").Create(ctx, churner(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "-n", "churn", "rollout", "status", "deploy/churner", "--timeout=3m")

	type sample struct {
		at          time.Duration
		size, inUse int64 // the largest of any member's
		rev         int64
	}
	var samples []sample
	start := time.Now()
	for time.Since(start) < d {
		time.Sleep(10 * time.Second)
		s := sample{at: time.Since(start)}
		for _, st := range memberStatuses(t, cli) {
			s.size, s.inUse, s.rev = max(s.size, st.DbSize), max(s.inUse, st.DbSizeInUse), max(s.rev, st.Header.Revision)
		}
		samples = append(samples, s)
	}
	first, last := samples[0], samples[len(samples)-1]
	rate := float64(last.rev-first.rev) / (last.at - first.at).Seconds()
	third := len(samples) / 3
	peak := func(ss []sample) (size, inUse int64) {
		for _, s := range ss {
			size, inUse = max(size, s.size), max(inUse, s.inUse)
		}
		return size, inUse
	}
	midSize, midInUse := peak(samples[third : 2*third])
	endSize, endInUse := peak(samples[2*third:])
	allSize, allInUse := peak(samples)
	t.Logf("%v of churn: %.0f etcd revisions a second (a lock taken and let go is two), %d in all; "+
		"largest member's database: file %.1f MiB, in use %.1f MiB at the peak; middle third %.1f/%.1f MiB, last third %.1f/%.1f MiB",
		d, rate, last.rev-first.rev, mib(allSize), mib(allInUse), mib(midSize), mib(midInUse), mib(endSize), mib(endInUse))
	if allSize > churnBound || allInUse > churnBound {
		t.Errorf("etcd's database reached %d bytes, %d in use: want both under %d", allSize, allInUse, churnBound)
	}
	if float64(endInUse) > 1.25*float64(midInUse)+(1<<20) {
		t.Errorf("etcd's data in use grew from %.1f MiB in the middle third to %.1f MiB in the last: its history is not compacted", mib(midInUse), mib(endInUse))
	}
	for i := 1; i < len(samples); i++ {
		if samples[i].rev <= samples[i-1].rev {
			t.Errorf("etcd's revision stood still from %v to %v: the churn stopped", samples[i-1].at, samples[i].at)
		}
	}
	if rate < 20 {
		t.Errorf("%.0f etcd revisions a second: too little churn to tell", rate)
	}
}

// churner is a Deployment of two injected pods, each running eight loops
// of baton run on locks the two share, as fast as they go.
func churner() *appsv1.Deployment {
	two := int32(2)
	labels := map[string]string{"app": "churner"}
	script := `for i in 1 2 3 4 5 6 7 8; do
  ( while true; do baton run --key churn/$i --wait 10s -- true || sleep 1; done ) &
done
wait`
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "churner", Namespace: "churn"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &two,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "churner", "baton.dev/inject": "true"}},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "worker", Image: "docker.io/baton/app:test", ImagePullPolicy: corev1.PullNever,
						Command: []string{"sh", "-c", script},
					}},
				},
			},
		},
	}
}
