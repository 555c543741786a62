package embedetcd

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

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
