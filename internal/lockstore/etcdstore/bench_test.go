package etcdstore

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// BenchmarkCycle measures the writes of one acquire and release of a free
// lock (Try, then Delete) beside the raw etcd transactions that are their
// limit, on the same etcd: what the store adds. Package coordinator
// measures the coordinator's own cost on top.
func BenchmarkCycle(b *testing.B) {
	f := newFixture(b)
	ctx := context.Background()
	b.Run("raw-txn", func(b *testing.B) {
		k := f.base + "raw/" + "k"
		id := clientv3.LeaseID(f.grant(b))
		b.ReportAllocs()
		for b.Loop() {
			r, err := f.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
				Then(clientv3.OpPut(k, "", clientv3.WithLease(id))).Commit()
			if err != nil || !r.Succeeded {
				b.Fatalf("acquire: %v %v", err, r)
			}
			r, err = f.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", r.Header.Revision)).
				Then(clientv3.OpDelete(k)).Commit()
			if err != nil || !r.Succeeded {
				b.Fatalf("release: %v %v", err, r)
			}
		}
	})
	b.Run("store", func(b *testing.B) {
		lock := f.base + "store/"
		id := f.grant(b)
		now := time.Now()
		p := lockstore.Put{Key: lock + "k", Lease: id, Record: keyspace.Holder{Owner: "o", Pod: "pod", AcquiredAt: now, ExpiresAt: now.Add(time.Minute)}}
		b.ReportAllocs()
		for b.Loop() {
			out, err := f.s.Try(lock, p)
			if err != nil || !out.OK {
				b.Fatalf("try: %v %+v", err, out)
			}
			if out, err = f.s.Delete(p.Key, out.Rev); err != nil || !out.OK {
				b.Fatalf("delete: %v %+v", err, out)
			}
		}
	})
}
