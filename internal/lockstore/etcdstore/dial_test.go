package etcdstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// TestDialOptionsSendNoFlowControlFrames: a client with DialOptions sends
// etcd no PING of its own and no WINDOW_UPDATE while it makes small
// transactions, and one with gRPC's defaults sends one of each about per
// transaction (or the check could not tell).
func TestDialOptionsSendNoFlowControlFrames(t *testing.T) {
	const txns = 200
	for _, tc := range []struct {
		name  string
		opts  []grpc.DialOption
		fixed bool
	}{{"DialOptions", DialOptions(), true}, {"gRPC defaults", nil, false}} {
		t.Run(tc.name, func(t *testing.T) {
			pings, updates := countClientFrames(t, tc.opts, txns)
			t.Logf("%d transactions: %d pings, %d window updates from the client", txns, pings, updates)
			if tc.fixed && (pings != 0 || updates != 0) {
				t.Errorf("%d pings and %d window updates; want none", pings, updates)
			}
			if !tc.fixed && (pings < txns/2 || updates < txns/2) {
				t.Errorf("%d pings and %d window updates; gRPC's defaults send about one of each per transaction", pings, updates)
			}
		})
	}
}

// countClientFrames makes txns transactions through a proxy that reads the
// client's HTTP/2 frames, and returns how many PINGs (not acks) and
// WINDOW_UPDATEs it sent after its first transaction (the connection's
// setup is not counted).
func countClientFrames(t *testing.T, opts []grpc.DialOption, txns int) (pings, updates int64) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var counting atomic.Bool
	var nPing, nUpdate atomic.Int64
	testEtcd.Forward(l, func(to io.Writer, from io.Reader) {
		readFrames(io.TeeReader(from, to), func(typ, flags byte) {
			switch {
			case !counting.Load():
			case typ == 0x6 && flags&0x1 == 0:
				nPing.Add(1)
			case typ == 0x8:
				nUpdate.Add(1)
			}
		})
		io.Copy(to, from)
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + sock}, DialTimeout: 5 * time.Second, DialOptions: opts, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	key := "/etcdstore/frames/" + t.Name()
	ctx := context.Background()
	for i := range txns + 1 {
		if i == 1 {
			counting.Store(true)
		}
		if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(key), ">", -1)).Then(clientv3.OpPut(key, "v")).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // frames of the last answer
	return nPing.Load(), nUpdate.Load()
}

// readFrames reads an HTTP/2 client stream (the preface, then frames) and
// calls f with each frame's type and flags until it ends.
func readFrames(r io.Reader, f func(typ, flags byte)) {
	preface := make([]byte, 24)
	if _, err := io.ReadFull(r, preface); err != nil || !bytes.HasPrefix(preface, []byte("PRI * HTTP/2.0")) {
		return
	}
	var h [9]byte
	for {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return
		}
		n := int64(binary.BigEndian.Uint32(append([]byte{0}, h[:3]...)))
		f(h[3], h[4])
		if _, err := io.CopyN(io.Discard, r, n); err != nil {
			return
		}
	}
}
