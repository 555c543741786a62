//go:build !lean

package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/etcdmembers"
)

// TestEtcdBackupOnceAndList: etcd-backup --once writes a snapshot and says
// which, --keep deletes the oldest, --list shows what is kept; what cannot
// work is refused with exit 2 naming the flag.
func TestEtcdBackupOnceAndList(t *testing.T) {
	dir := t.TempDir()
	ep := testEtcd.Endpoints()[0]
	var names []string
	for range 2 {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"etcd-backup", "--once", "--etcd-endpoints=" + ep, "--dir=" + dir, "--keep=1"}, env(nil), &out, &errb); code != 0 {
			t.Fatalf("etcd-backup --once: exit %d: %s%s", code, out.String(), errb.String())
		}
		f := strings.Fields(out.String())
		if len(f) < 2 || f[0] != "wrote" || !strings.HasPrefix(f[1], "db-") {
			t.Fatalf("etcd-backup --once printed %q", out.String())
		}
		names = append(names, f[1])
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"etcd-backup", "--list", "--dir=" + dir}, env(map[string]string{"BATON_KEEP": "1"}), &out, &errb); code != 0 {
		t.Fatalf("etcd-backup --list: exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "FILE") || !strings.HasPrefix(lines[1], names[1]) {
		t.Fatalf("etcd-backup --list:\n%s\nwant the newest, %s, alone", out.String(), names[1])
	}

	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--once", "--list", "--dir=" + dir}, "--once and --list"},
		{[]string{"--once", "--etcd-endpoints=" + ep}, "--dir"},
		{[]string{"--once", "--dir=" + dir}, "--etcd-endpoints"},
		{[]string{"--once", "--dir=" + dir, "--etcd-endpoints=" + ep + "," + ep}, "--etcd-endpoints: give one"},
		{[]string{"--once", "--dir=" + dir, "--etcd-endpoints=" + ep, "--keep=0"}, "--keep"},
		{[]string{"--dir=" + dir, "--etcd-endpoints=" + ep, "--every=0s"}, "--every"},
		{[]string{"--once", "--dir=" + dir, "--etcd-endpoints=" + ep, "--etcd-ca-secret=ca", "--etcd-username=u"}, "--etcd-ca-secret"},
		{[]string{"--once", "--dir=" + dir, "--etcd-endpoints=" + ep, "--metrics-addr=:8080"}, "--metrics-addr"},
		{[]string{"--dir=" + dir, "--etcd-endpoints=" + ep, "--metrics-addr=8080"}, "--metrics-addr"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"etcd-backup"}, c.args...), env(nil), &out, &errb); code != 2 || !strings.Contains(errb.String(), c.says) {
			t.Errorf("etcd-backup %v: exit %d, %q; want 2 naming %s", c.args, code, errb.String(), c.says)
		}
	}
}

// TestEtcdBackupMetrics: on its schedule, etcd-backup serves when the
// newest snapshot was taken, its revision and the snapshots taken.
func TestEtcdBackupMetrics(t *testing.T) {
	addr := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var out, errb bytes.Buffer
	go func() {
		done <- run(ctx, []string{"etcd-backup", "--etcd-endpoints=" + testEtcd.Endpoints()[0], "--dir=" + t.TempDir(), "--every=1h", "--metrics-addr=" + addr}, env(nil), &out, &errb)
	}()
	var body string
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(body, `baton_etcd_backups_total{result="ok"} 1`); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("after 10s, /metrics:\n%s\nthe command's log:\n%s", body, errb.String())
		}
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
		}
	}
	for _, want := range []string{`baton_etcd_backups_total{result="failed"} 0`, "baton_etcd_backup_interval_seconds 3600", "baton_etcd_backups_kept 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %q:\n%s", want, body)
		}
	}
	m := regexp.MustCompile(`(?m)^baton_etcd_backup_last_success_timestamp_seconds (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no baton_etcd_backup_last_success_timestamp_seconds:\n%s", body)
	}
	if at, err := strconv.ParseFloat(m[1], 64); err != nil || time.Since(time.Unix(int64(at), 0)) > time.Minute {
		t.Errorf("the last backup at %s, want about now", m[1])
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("etcd-backup ended with exit %d: %s", code, errb.String())
	}
}

// TestEtcdRestore: etcd-restore restores the newest snapshot of a backup
// directory into a data directory and says at which revision etcd starts;
// it refuses what cannot work, naming the flag.
func TestEtcdRestore(t *testing.T) {
	backups, data := t.TempDir(), filepath.Join(t.TempDir(), "data")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"etcd-backup", "--once", "--etcd-endpoints=" + testEtcd.Endpoints()[0], "--dir=" + backups}, env(nil), &out, &errb); code != 0 {
		t.Fatalf("etcd-backup --once: exit %d: %s", code, errb.String())
	}
	snap := strings.Fields(out.String())[1]
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--data-dir=" + data, "--name=m0", "--peer-url=http://127.0.0.1:2380"}, 2, "--snapshot or --backups"},
		{[]string{"--backups=" + backups, "--snapshot=x", "--data-dir=" + data, "--name=m0", "--peer-url=http://127.0.0.1:2380"}, 2, "--snapshot or --backups"},
		{[]string{"--backups=" + backups, "--data-dir=" + data, "--peer-url=http://127.0.0.1:2380"}, 2, "--name"},
		{[]string{"--backups=" + backups, "--data-dir=" + data, "--name=m0", "--peer-url=http://127.0.0.1:2380", "--revision-bump=0"}, 2, "--revision-bump"},
		{[]string{"--backups=" + t.TempDir(), "--data-dir=" + data, "--name=m0", "--peer-url=http://127.0.0.1:2380"}, 1, "no snapshot there"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"etcd-restore"}, c.args...), env(nil), &out, &errb); code != c.code || !strings.Contains(errb.String(), c.says) {
			t.Errorf("etcd-restore %v: exit %d, %q; want %d saying %s", c.args, code, errb.String(), c.code, c.says)
		}
	}
	out.Reset()
	if code := run(context.Background(), []string{"etcd-restore", "--backups=" + backups, "--data-dir=" + data, "--name=m0", "--peer-url=http://127.0.0.1:2380"}, env(nil), &out, &errb); code != 0 {
		t.Fatalf("etcd-restore: exit %d: %s", code, errb.String())
	}
	if !regexp.MustCompile(`^restored ` + regexp.QuoteMeta(snap+" into "+data) + ` as the member m0: etcd starts at revision 1\d{9}, alone`).MatchString(out.String()) {
		t.Fatalf("etcd-restore printed %q", out.String())
	}
	if has, err := etcdmembers.HasData(data); err != nil || !has {
		t.Fatalf("no etcd data after the restore: %v", err)
	}
}
