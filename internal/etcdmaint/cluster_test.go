package etcdmaint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

// startCluster starts a three-member etcd in this process, each member
// with the space quota, clients on unix sockets and peers on loopback
// TCP; the member slow has slowQuota, and compacts ten revisions at a
// time with a pause between. It returns the members' client endpoints.
func startCluster(t *testing.T, quota int64, slow int, slowQuota int64) []string {
	t.Helper()
	dir, err := os.MkdirTemp("", "bm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	const n = 3
	var initial []string
	peers := make([]url.URL, n)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		peers[i] = url.URL{Scheme: "http", Host: l.Addr().String()}
		l.Close()
		initial = append(initial, fmt.Sprintf("m%d=%s", i, peers[i].String()))
	}
	members := make(chan *embed.Etcd, n)
	errs := make(chan error, n)
	eps := make([]string, n)
	for i := range n {
		name := fmt.Sprintf("m%d", i)
		peer := peers[i]
		client := url.URL{Scheme: "unix", Path: filepath.Join(dir, name+".sock")}
		eps[i] = client.String()
		cfg := embed.NewConfig()
		cfg.Name, cfg.Dir = name, filepath.Join(dir, name)
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.InitialCluster, cfg.InitialClusterToken = strings.Join(initial, ","), "etcdmaint"
		cfg.UnsafeNoFsync = true
		cfg.QuotaBackendBytes = quota
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		if i == slow {
			cfg.QuotaBackendBytes = slowQuota
			cfg.CompactionBatchLimit, cfg.CompactionSleepInterval = 10, time.Second
		}
		// The members wait for each other: start them all, then wait.
		go func() {
			e, err := embed.StartEtcd(cfg)
			if err != nil {
				errs <- err
				return
			}
			members <- e
			select {
			case <-e.Server.ReadyNotify():
				errs <- nil
			case err := <-e.Err():
				errs <- err
			case <-time.After(time.Minute):
				errs <- errors.New("not ready after 1m")
			}
		}()
	}
	var failed error
	for range n {
		if err := <-errs; err != nil && failed == nil {
			failed = err
		}
	}
	close(members)
	for e := range members {
		t.Cleanup(e.Close)
	}
	if failed != nil {
		t.Fatalf("three-member etcd: %v", failed)
	}
	return eps
}

// TestDisarmsWhenAMemberCompactsLate: each member compacts its history by
// itself, and a pass's compaction returns once the member it asked has. A
// member still compacting when it is defragmented is left full; the next
// pass, with no key deleted since, defragments it again once its
// compaction has freed enough, and disarms the alarm. Without that, the
// alarm stayed raised until a key was deleted, and no lock was granted.
func TestDisarmsWhenAMemberCompactsLate(t *testing.T) {
	// m2 alone has a small quota, and compacts slowly. Its keys are, in
	// the order of their revisions: live keys, history (keys written and
	// deleted), and a live value of 1 MiB that takes it past its quota
	// (etcd applies the write that does, then raises NOSPACE). Compacted,
	// its file is well under its quota; defragmented first, well over. A
	// compaction goes from the oldest revision up: m2's frees nothing for
	// 8 batches of live keys, a second apart.
	const m2Quota = 3 << 20
	eps := startCluster(t, 64<<20, 2, m2Quota)
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps[:1], DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	for i := range 80 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/live/%d", i), strings.Repeat("x", 16<<10)); err != nil {
			t.Fatalf("live key %d: %v", i, err)
		}
	}
	for i := range 7 {
		if _, err := churn(t, cli, fmt.Sprintf("/history/%d/", i), 5, 16<<10); err != nil {
			t.Fatalf("history %d: %v", i, err)
		}
	}
	if _, err := cli.Put(ctx, "/big", strings.Repeat("x", 1<<20)); err != nil {
		t.Fatal(err)
	}
	etcdtest.SetNoSpace(t, cli, true)
	var rec recorder
	m, err := New(cli, Default(), logger(), &rec)
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Pass(ctx)
	if err == nil || r.Disarmed || !strings.Contains(err.Error(), "etcd member m2 has") || !slices.Equal(r.Defragmented, []string{"m2"}) {
		t.Fatalf("first pass, m2 compacting ten revisions a second: %+v, %v, heard %v; want m2 alone defragmented, before its compaction freed anything, and the alarm kept", r, err, rec.defrag)
	}
	// m2's compaction goes on: what it uses drops.
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := cli.Status(ctx, eps[2])
		if err != nil {
			t.Fatal(err)
		}
		if st.DbSizeInUse < m2Quota*90/100 {
			t.Logf("m2's compaction freed room: %d of its %d bytes in use", st.DbSizeInUse, st.DbSize)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("m2 still uses %d of its %d bytes a minute after the compaction", st.DbSizeInUse, st.DbSize)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r, err = m.Pass(ctx)
	if err != nil || !r.Disarmed || !slices.Equal(r.Defragmented, []string{"m2"}) {
		t.Fatalf("pass after m2's compaction freed room, no key deleted since: %+v, %v, heard %v; want m2 defragmented again and the alarm disarmed", r, err, rec.defrag)
	}
	if _, err := cli.Put(ctx, "/after", "x"); err != nil {
		t.Fatalf("write after the pass: %v", err)
	}
	// Nothing freed since, the next pass stops no member.
	n := len(rec.defrag)
	if _, err := m.Pass(ctx); err != nil || len(rec.defrag) != n {
		t.Fatalf("pass after the alarm was disarmed: %v, heard %v", err, rec.defrag[n:])
	}
}

// TestRetriesSoonerWhileOutOfSpace: no lock is granted while etcd is out
// of space, so a pass that could not disarm it is followed sooner.
func TestRetriesSoonerWhileOutOfSpace(t *testing.T) {
	m := &Maintainer{cfg: Default()}
	for _, tc := range []struct {
		r    Report
		want time.Duration
	}{
		{Report{}, time.Minute},
		{Report{NoSpace: true}, noSpaceRetry},
		{Report{NoSpace: true, Disarmed: true}, time.Minute},
	} {
		if got := m.next(tc.r); got != tc.want {
			t.Errorf("after a pass %+v: next in %v, want %v", tc.r, got, tc.want)
		}
	}
	m.cfg.Interval = time.Second
	if got := m.next(Report{NoSpace: true}); got != time.Second {
		t.Errorf("an interval of 1s while out of space: next in %v, want 1s", got)
	}
}
