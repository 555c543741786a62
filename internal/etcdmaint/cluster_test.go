package etcdmaint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startCluster starts a three-member etcd in this process, each member
// with the space quota, clients on unix sockets and peers on loopback
// TCP; the member
// slow compacts ten revisions at a time with a pause between. It returns
// the members' client endpoints.
func startCluster(t *testing.T, quota int64, slow int) []string {
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
			cfg.CompactionBatchLimit, cfg.CompactionSleepInterval = 10, 200*time.Millisecond
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
	const quota = 4 << 20
	eps := startCluster(t, quota, 2)
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps[:1], DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	churnToNoSpace(t, cli, quota)
	var rec recorder
	m, err := New(cli, Default(), logger(), &rec)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := m.Pass(ctx)
	if err == nil || r.Disarmed || !strings.Contains(err.Error(), "etcd member m2") {
		t.Fatalf("first pass, m2 compacting ten revisions every 200ms: %+v, %v, heard %v; want the alarm kept for m2, defragmented before its compaction ended", r, err, rec.defrag)
	}
	// m2's compaction goes on, and ends: what it uses drops.
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := cli.Status(ctx, eps[2])
		if err != nil {
			t.Fatal(err)
		}
		if st.DbSizeInUse < quota/2 {
			t.Logf("m2's compaction ended: %d of its %d bytes in use", st.DbSizeInUse, st.DbSize)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("m2 still uses %d of its %d bytes a minute after the compaction", st.DbSizeInUse, st.DbSize)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r, err = m.Pass(ctx)
	if err != nil || !r.Disarmed {
		t.Fatalf("pass after m2's compaction ended, no key deleted since: %+v, %v, heard %v; want m2 defragmented again and the alarm disarmed", r, err, rec.defrag)
	}
	if last := rec.defrag[len(rec.defrag)-1]; last != "m2 no_space" {
		t.Fatalf("defragmentations %v: want the last m2's, for no_space", rec.defrag)
	}
	if _, err := cli.Put(ctx, "/after", "x"); err != nil {
		t.Fatalf("write after the pass: %v", err)
	}
	// Nothing freed since, the next passes stop no member.
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
