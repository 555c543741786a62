package etcdbackup

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

// TestRestoreBumpsAndReplaces: a snapshot restored over a member's data
// directory replaces what was there; etcd started on it holds the
// snapshot's keys under a new cluster id, at a revision bumped past the
// snapshot's, the old revisions compacted. A snapshot cut short is refused
// and leaves the data directory as it was.
func TestRestoreBumpsAndReplaces(t *testing.T) {
	cli, _ := srv.Client(t)
	ctx := context.Background()
	put, err := cli.Put(ctx, "/restore-test", "kept")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	cfg.Dir = t.TempDir()
	b, _, err := Take(ctx, cli, cfg, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(cfg.Dir, b.Name)

	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "old"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	peer := etcdtest.FreeURL(t)
	rc := RestoreConfig{Snapshot: snap, DataDir: data, Name: "m0", PeerURL: peer, RevisionBump: DefaultRevisionBump}

	// Cut short, at a page or anywhere, or one byte changed: refused,
	// the old data left.
	whole, _ := os.ReadFile(snap)
	flipped := append([]byte(nil), whole...)
	flipped[len(flipped)/3] ^= 0xff
	for what, b := range map[string][]byte{"cut at a page": whole[:len(whole)/2/4096*4096], "cut anywhere": whole[:len(whole)/2+7], "one byte changed": flipped} {
		bad := rc
		bad.Snapshot = filepath.Join(t.TempDir(), "bad.db")
		if err := os.WriteFile(bad.Snapshot, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Restore(bad, zap.NewNop()); err == nil {
			t.Fatalf("a snapshot %s restored", what)
		}
	}
	if _, err := os.Stat(filepath.Join(data, "old")); err != nil {
		t.Fatalf("a refused restore touched the data: %v", err)
	}

	rev, err := Restore(rc, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if rev != b.Revision+DefaultRevisionBump {
		t.Errorf("restored at revision %d; want %d", rev, b.Revision+DefaultRevisionBump)
	}
	if _, err := os.Stat(filepath.Join(data, "old")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old data is still there: %v", err)
	}

	ec := embed.NewConfig()
	ec.Name, ec.Dir = "m0", data
	pu, _ := url.Parse(peer)
	cu, _ := url.Parse(etcdtest.FreeURL(t))
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	ec.InitialCluster = "m0=" + peer
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(ec)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcd on the restored data not ready in 30s")
	}
	rcli, err := clientv3.New(clientv3.Config{Endpoints: []string{cu.String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer rcli.Close()
	got, err := rcli.Get(ctx, "/restore-test")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "kept" {
		t.Fatalf("the restored key: %+v, %v", got, err)
	}
	if got.Header.Revision < rev || got.Header.ClusterId == put.Header.ClusterId {
		t.Errorf("restored etcd at revision %d, cluster %x; want at least %d, and a cluster other than %x", got.Header.Revision, got.Header.ClusterId, rev, put.Header.ClusterId)
	}
	if _, err := rcli.Get(ctx, "/restore-test", clientv3.WithRev(put.Header.Revision)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("a read at the snapshot's old revision: %v; want compacted", err)
	}
	next, err := rcli.Put(ctx, "/restore-next", "x")
	if err != nil {
		t.Fatal(err)
	}
	if next.Header.Revision <= rev {
		t.Errorf("a write after the restore: revision %d; want above %d", next.Header.Revision, rev)
	}
}
