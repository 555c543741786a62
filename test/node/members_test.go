package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baton-dev/baton/internal/etcdbackup"
	"github.com/baton-dev/baton/internal/etcdmembers"
)

// opsPage is the runbooks' page, whose shell blocks the node runs as
// written too.
const opsPage = "docs/operations.md"

// rootCreds is the Secret, in the release's namespace, of a certificate of
// etcd's root user, which the test issues from the chart's etcd's CA (as
// any administrator of the namespace can): member list and hashes need it.
const rootCreds = "node-test-etcd-root"

// tryEtcdctlAsRoot runs etcdctl with args against the chart's etcd as its
// root user, in a pod of the release's namespace (the members' names
// resolve there), and returns what it printed, or why it failed.
func tryEtcdctlAsRoot(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx := context.Background()
	secrets := node.Client.CoreV1().Secrets(system)
	if _, err := secrets.Get(ctx, rootCreds, metav1.GetOptions{}); err != nil {
		certPEM, keyPEM, caPEM := rootCert(t)
		if _, err := secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: rootCreds},
			Data:       map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": caPEM},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	full := append([]string{"--endpoints=https://" + release + "-etcd." + system + ".svc:2379", "--cacert=/creds/ca.crt", "--cert=/creds/tls.crt", "--key=/creds/tls.key"}, args...)
	name := fmt.Sprintf("etcdctl-root-%d", time.Now().UnixNano()%1e9)
	code, out := runEtcdctlIn(t, system, rootCreds, name, full)
	if code != 0 {
		return "", fmt.Errorf("etcdctl %s as root: exit %d: %s", strings.Join(args, " "), code, out)
	}
	return out, nil
}

// etcdctlAsRoot is tryEtcdctlAsRoot, which must succeed.
func etcdctlAsRoot(t *testing.T, args ...string) string {
	t.Helper()
	out, err := tryEtcdctlAsRoot(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// etcdMembers are etcd's members as etcdctl member list -w json shows them.
type etcdMembers struct {
	Members []struct {
		ID        uint64   `json:"ID"`
		Name      string   `json:"name"`
		PeerURLs  []string `json:"peerURLs"`
		IsLearner bool     `json:"isLearner"`
	} `json:"members"`
}

// memberLostItsVolume: under the app's turns, one etcd member's claim and
// pod are deleted as docs/operations.md shows. The member comes back on a
// new volume, joins as a learner and is promoted; every member's key-value
// hash agrees at one revision; no run of the phase is cut short and fences
// keep growing.
func memberLostItsVolume(t *testing.T, sh *docShell, phases string) {
	ctx := context.Background()
	member := release + "-etcd-1"
	claim := "data-" + member
	pvc, err := node.Client.CoreV1().PersistentVolumeClaims(system).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var before etcdMembers
	if err := json.Unmarshal([]byte(etcdctlAsRoot(t, "member", "list", "-w", "json")), &before); err != nil {
		t.Fatal(err)
	}
	runs := checkPhases(t, phases)
	first := len(runs)

	start := time.Now()
	sh.runPage(t, opsPage, "$ kubectl -n baton-system delete pvc data-baton-etcd-1", nil)
	eventually(t, 4*time.Minute, member+" back on a new volume, told to join", func() error {
		p, err := node.Client.CoreV1().Pods(system).Get(ctx, member, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s := p.Annotations[etcdmembers.StateAnnotation]; s != etcdmembers.StateExisting {
			return fmt.Errorf("pod %s (phase %s) told %q", p.UID, p.Status.Phase, s)
		}
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
		if !ready {
			return fmt.Errorf("not ready")
		}
		c, err := node.Client.CoreV1().PersistentVolumeClaims(system).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c.UID == pvc.UID {
			return fmt.Errorf("claim %s: still the old one", claim)
		}
		return nil
	})
	t.Logf("%s was back and ready %v after its claim and pod were deleted", member, time.Since(start).Round(time.Millisecond))
	var after etcdMembers
	eventually(t, 2*time.Minute, "three voting members", func() error {
		out, err := tryEtcdctlAsRoot(t, "member", "list", "-w", "json")
		if err != nil {
			return err
		}
		after = etcdMembers{} // see votingMembers
		if err := json.Unmarshal([]byte(out), &after); err != nil {
			return err
		}
		if len(after.Members) != 3 {
			return fmt.Errorf("members %+v", after.Members)
		}
		for _, m := range after.Members {
			if m.IsLearner || m.Name == "" {
				return fmt.Errorf("member %q (%x) learner %v", m.Name, m.ID, m.IsLearner)
			}
			for _, old := range before.Members {
				if m.Name == member && m.ID == old.ID {
					return fmt.Errorf("%s kept its old ID %x", member, m.ID)
				}
			}
		}
		return nil
	})
	t.Logf("%s voting again %v after its claim and pod were deleted", member, time.Since(start).Round(time.Millisecond))

	hashesAgree(t)

	// The app took turns throughout: every run since it began ended as
	// its owner ended it (none was told its lock was lost), and runs
	// went on after it.
	eventually(t, 2*time.Minute, "two runs after the member was back", func() error {
		if n := len(checkPhases(t, phases)); n < len(runs)+2 {
			return fmt.Errorf("%d runs, %d before", n, len(runs))
		}
		return nil
	})
	all := checkPhases(t, phases)
	for _, r := range all[max(first-1, 0) : len(all)-1] {
		if r.termed || !r.ended {
			t.Errorf("%s's run with fence %d was cut short while the member was replaced (ended %v, told lost %v)", r.pod, r.fence, r.ended, r.termed)
		}
	}
}

// wroteLine is what etcd-backup --once prints.
var wroteLine = regexp.MustCompile(`^wrote db-\d{8}T\d{6}Z-r\d+\.db \(revision \d+, \d+ bytes\) in \S+$`)

// etcdBackups: the chart's backup pod takes its first snapshot of etcd by
// itself, signed in as etcd's root through the controller's service
// account; then docs/operations.md's commands, as written, take one more
// and list both.
func etcdBackups(t *testing.T, sh *docShell) {
	start := time.Now()
	eventually(t, 3*time.Minute, "the first scheduled backup", func() error {
		cmd := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), "-n", system, "exec", release+"-etcd-backup-0", "--", "/baton-controller", "etcd-backup", "--list")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+node.Kubeconfig)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		if n := len(strings.Split(strings.TrimSpace(string(out)), "\n")); n != 2 {
			return fmt.Errorf("listed:\n%s", out)
		}
		return nil
	})
	t.Logf("the first scheduled backup was listed %v after asking", time.Since(start).Round(time.Millisecond))
	once := "kubectl -n baton-system exec baton-etcd-backup-0 -- /baton-controller etcd-backup --once"
	sh.runPage(t, opsPage, "$ "+once, map[string]check{
		once: linesLike(wroteLine),
		"kubectl -n baton-system exec baton-etcd-backup-0 -- /baton-controller etcd-backup --list": table(),
	})
	// BatonEtcdBackupMissing's runbook: its commands find the pod and its
	// backups' log lines.
	sh.runPage(t, opsPage, "$ kubectl -n baton-system get pods -l app.kubernetes.io/component=etcd-backup", nil)
	// What the alert reads, from the pod's port metrics: a scheduled
	// backup written (one tried before etcd answered may have failed
	// first), the newest within its interval.
	pod, err := node.Client.CoreV1().Pods(system).Get(context.Background(), release+"-etcd-backup-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + net.JoinHostPort(pod.Status.PodIP, "8080") + "/metrics")
	if err != nil {
		t.Fatalf("the backup pod's metrics: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`(?m)^baton_etcd_backups_total\{result="ok"\} [1-9]`, `(?m)^baton_etcd_backup_interval_seconds 3600$`} {
		if !regexp.MustCompile(want).Match(body) {
			t.Errorf("the backup pod's metrics have no %s:\n%s", want, body)
		}
	}
	m := regexp.MustCompile(`(?m)^baton_etcd_backup_last_success_timestamp_seconds (\S+)$`).FindStringSubmatch(string(body))
	if m == nil {
		t.Fatalf("no baton_etcd_backup_last_success_timestamp_seconds:\n%s", body)
	}
	if at, err := strconv.ParseFloat(m[1], 64); err != nil || time.Since(time.Unix(int64(at), 0)) > time.Hour {
		t.Errorf("the newest backup at %s, want within its interval (1h)", m[1])
	}
}

// hashesAgree checks that every member of the chart's etcd holds the same
// keys at one revision (etcdctl endpoint hashkv --cluster --rev).
func hashesAgree(t *testing.T) {
	t.Helper()
	var now struct {
		Header struct {
			Revision int64 `json:"revision"`
		} `json:"header"`
	}
	if err := json.Unmarshal([]byte(etcdctlAsRoot(t, "get", "/", "--prefix", "--keys-only", "--limit=1", "-w", "json")), &now); err != nil || now.Header.Revision == 0 {
		t.Fatalf("etcd's revision: %+v, %v", now, err)
	}
	rev := fmt.Sprint(now.Header.Revision)
	eventually(t, time.Minute, "the members' hashes agree at revision "+rev, func() error {
		var got []struct {
			Endpoint string `json:"Endpoint"`
			HashKV   struct {
				Hash uint32 `json:"hash"`
			} `json:"HashKV"`
		}
		out, err := tryEtcdctlAsRoot(t, "endpoint", "hashkv", "--cluster", "--rev="+rev, "-w", "json")
		if err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			return err
		}
		hashes := map[uint32][]string{}
		for _, h := range got {
			hashes[h.HashKV.Hash] = append(hashes[h.HashKV.Hash], h.Endpoint)
		}
		if len(got) != 3 || len(hashes) != 1 {
			return fmt.Errorf("hashes %v", hashes)
		}
		return nil
	})
}

// votingMembers waits until etcd has want voting members, all started.
func votingMembers(t *testing.T, d time.Duration, want int) etcdMembers {
	t.Helper()
	var l etcdMembers
	eventually(t, d, fmt.Sprintf("%d voting members", want), func() error {
		out, err := tryEtcdctlAsRoot(t, "member", "list", "-w", "json")
		if err != nil {
			return err
		}
		// A fresh value: JSON leaves what it omits (isLearner when false)
		// as an earlier answer set it.
		l = etcdMembers{}
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			return err
		}
		if len(l.Members) != want {
			return fmt.Errorf("members %+v", l.Members)
		}
		for _, m := range l.Members {
			if m.IsLearner || m.Name == "" {
				return fmt.Errorf("member %q (%x) learner %v", m.Name, m.ID, m.IsLearner)
			}
		}
		return nil
	})
	return l
}

// restoredLine is what etcd-restore prints.
var restoredLine = regexp.MustCompile(`^restored db-\d{8}T\d{6}Z-r\d+\.db into /var/lib/etcd/data as the member baton-etcd-0: etcd starts at revision \d{10,}, alone; the other members join it$`)

// etcdRestored: a snapshot taken, the app's turns go on past it, and then
// etcd is restored from it as docs/operations.md shows, under the app. The
// run cut short by the restore was told its lock was lost before any run
// after it started; every run after the restore has a fence above every
// one before (bumped past them); etcd has its three voting members again,
// their hashes agreeing.
func etcdRestored(t *testing.T, sh *docShell, phases string) {
	kubectl(t, "-n", system, "exec", release+"-etcd-backup-0", "--", "/baton-controller", "etcd-backup", "--once")
	taken := len(checkPhases(t, phases))
	eventually(t, 2*time.Minute, "two runs after the snapshot", func() error {
		if n := len(checkPhases(t, phases)); n < taken+2 {
			return fmt.Errorf("%d runs, %d when it was taken", n, taken)
		}
		return nil
	})
	start := time.Now()
	sh.runPage(t, opsPage, "$ kubectl -n baton-system scale statefulset baton-etcd baton-etcd-backup --replicas=0", map[string]check{
		"kubectl -n baton-system logs job/baton-etcd-restore": linesLike(restoredLine),
	})
	t.Logf("the restore's commands took %v", time.Since(start).Round(time.Millisecond))
	votingMembers(t, 4*time.Minute, 3)
	t.Logf("etcd had its three voting members again %v after the restore began", time.Since(start).Round(time.Millisecond))
	hashesAgree(t)

	var cut run
	eventually(t, 3*time.Minute, "a run after the restore", func() error {
		runs := checkPhases(t, phases)
		for i, r := range runs {
			if r.fence > etcdbackup.DefaultRevisionBump {
				if i == 0 {
					return fmt.Errorf("no run before the restore")
				}
				cut = runs[i-1]
				return nil
			}
		}
		return fmt.Errorf("none above the bump yet")
	})
	t.Logf("the first run after the restore started %v after it began", time.Since(start).Round(time.Millisecond))
	t.Logf("the last run before the restore, %s's with fence %d: ended %v, told its lock was lost %v", cut.pod, cut.fence, cut.ended, cut.termed)
	if !cut.ended && !cut.termed {
		t.Errorf("%s's run with fence %d, the last before the restore, neither ended nor was told its lock was lost", cut.pod, cut.fence)
	}
	if cut.termed {
		b, err := os.ReadFile(phases)
		if err != nil {
			t.Fatal(err)
		}
		term := strings.Index(string(b), fmt.Sprintf("term %s %d\n", cut.pod, cut.fence))
		after := regexp.MustCompile(`(?m)^start \S+ \d{10,}$`).FindIndex(b)
		if term < 0 || after == nil || term > after[0] {
			t.Errorf("%s was told its lock (fence %d) was lost after a run of the restored etcd started:\n%s", cut.pod, cut.fence, b)
		}
	}
}
