package embedetcd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestStartServesClientsAndKeepsData(t *testing.T) {
	dir, err := os.MkdirTemp("", "baton-embed")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := Default(filepath.Join(dir, "data"))
	cfg.ClientURL = "unix://" + filepath.Join(dir, "c.sock")
	cfg.UnsafeNoFsync = true
	ctx := context.Background()

	for round := 0; round < 2; round++ {
		e, err := Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if round == 0 {
			_, err = cli.Put(cctx, "k", "v")
		} else {
			var r *clientv3.GetResponse
			r, err = cli.Get(cctx, "k")
			if err == nil && (len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v") {
				t.Errorf("after restart: %v, want k=v", r.Kvs)
			}
		}
		cancel()
		cli.Close()
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoopbackPortZero(t *testing.T) {
	dir := t.TempDir()
	cfg := Default(filepath.Join(dir, "d"))
	cfg.ClientURL = "http://127.0.0.1:0"
	cfg.PeerURL = "unix://" + filepath.Join(os.TempDir(), "baton-peer-test.sock")
	os.Remove(filepath.Join(os.TempDir(), "baton-peer-test.sock"))
	cfg.UnsafeNoFsync = true
	e, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if ep := e.Endpoints()[0]; ep == "http://127.0.0.1:0" {
		t.Fatalf("endpoint %q does not carry the real port", ep)
	}
}

func TestValidate(t *testing.T) {
	for name, c := range map[string]Config{
		"no data dir":   {ClientURL: "http://127.0.0.1:1", PeerURL: "unix:///x", StartTimeout: time.Second},
		"bad scheme":    {DataDir: "d", ClientURL: "ftp://x", PeerURL: "unix:///x", StartTimeout: time.Second},
		"no timeout":    {DataDir: "d", ClientURL: "http://127.0.0.1:1", PeerURL: "unix:///x"},
		"empty address": {DataDir: "d", ClientURL: "http://", PeerURL: "unix:///x", StartTimeout: time.Second},
		"TLS on http": {DataDir: "d", ClientURL: "http://127.0.0.1:1", PeerURL: "unix:///x", StartTimeout: time.Second,
			TLS: &ServerTLS{CertFile: "c", KeyFile: "k"}},
		"TLS without a key": {DataDir: "d", ClientURL: "https://127.0.0.1:1", PeerURL: "unix:///x", StartTimeout: time.Second,
			TLS: &ServerTLS{CertFile: "c"}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate() = nil, want an error", name)
		}
	}
	if err := Default("d").Validate(); err != nil {
		t.Errorf("Default: %v", err)
	}
}

// TestHistoryIsCompacted: the member keeps its keys' past revisions for
// History and compacts away the older ones by itself, so that a read at
// an old revision is refused as compacted, while the keys' present
// values stay.
func TestHistoryIsCompacted(t *testing.T) {
	dir := t.TempDir()
	cfg := Default(filepath.Join(dir, "d"))
	cfg.ClientURL = "unix://" + filepath.Join(dir, "c.sock")
	cfg.UnsafeNoFsync = true
	cfg.History = time.Second
	ctx := context.Background()
	e, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	first, err := cli.Put(ctx, "k", "0")
	if err != nil {
		t.Fatal(err)
	}
	old := first.Header.Revision
	start := time.Now()
	for i := 1; ; i++ {
		if _, err := cli.Put(ctx, "k", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		_, err := cli.Get(ctx, "k", clientv3.WithRev(old))
		if errors.Is(err, rpctypes.ErrCompacted) {
			t.Logf("revision %d compacted %v after it was written, %d writes later", old, time.Since(start).Round(time.Millisecond), i)
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("revision %d still readable %v after it was written, with a history of %v", old, time.Since(start), cfg.History)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r, err := cli.Get(ctx, "k")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) == "0" {
		t.Fatalf("after compaction, k is %v (%v), want its latest value", r, err)
	}
}

// TestHistoryIsBounded: a member must keep a history of at least a
// second; none would let its database grow until the quota stops it.
func TestHistoryIsBounded(t *testing.T) {
	cfg := Default(t.TempDir())
	for _, h := range []time.Duration{0, -time.Minute, 500 * time.Millisecond} {
		cfg.History = h
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "history") {
			t.Errorf("history %v: %v, want refused", h, err)
		}
	}
}
