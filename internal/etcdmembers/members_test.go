package etcdmembers

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

// TestKeeper runs the keeper against a real kube-apiserver, on pods whose
// status the test sets as a kubelet would, each case in a namespace of
// its own.
func TestKeeper(t *testing.T) {
	k := startKube(t)
	for _, c := range []struct {
		ns  string
		run func(*testing.T, *kube)
	}{
		{"found", foundsANewCluster},
		{"refound", takesUpAFoundingCutShort},
		{"noquorum", nothingChangesWithoutQuorum},
		{"replace", replacesAMemberThatLostItsData},
		{"grow", growsOneMemberBackToThree},
	} {
		t.Run(c.ns, func(t *testing.T) {
			kn := &kube{c: k.c, ns: c.ns}
			kn.namespace(t)
			c.run(t, kn)
		})
	}
}

// deadEtcd is a client of an etcd that is not there.
func deadEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdtest.FreeURL(t)}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func fakePeers(t *testing.T) []Peer {
	return []Peer{{"etcd-0", etcdtest.FreeURL(t)}, {"etcd-1", etcdtest.FreeURL(t)}, {"etcd-2", etcdtest.FreeURL(t)}}
}

// foundsANewCluster: while etcd has no quorum, the member pods are told
// to found a new cluster once all of them wait at their gates, not before.
func foundsANewCluster(t *testing.T, k *kube) {
	kp := k.keeper(t, deadEtcd(t), fakePeers(t))
	k.pod(t, "etcd-0", gated)
	k.pod(t, "etcd-1", gated)
	k.pod(t, "etcd-2", pending)
	ctx := context.Background()
	if r, err := kp.Pass(ctx); err != nil || len(r) != 0 {
		t.Fatalf("a pass while a member's pod has not started: %v, %v", r, err)
	}
	// A gate that has just started may be one that finds data and
	// returns: it is not taken to wait yet.
	k.status(t, "etcd-2", gating)
	if r, err := kp.Pass(ctx); err != nil || len(r) != 0 {
		t.Fatalf("a pass while a member's gate has just started: %v, %v", r, err)
	}
	for _, n := range []string{"etcd-0", "etcd-1"} {
		if s := k.state(t, n); s != "" {
			t.Fatalf("%s told %q before every member's pod waits", n, s)
		}
	}
	k.status(t, "etcd-2", gated)
	r, err := kp.Pass(ctx)
	if err != nil || len(r) != 3 {
		t.Fatalf("a pass with every member at its gate: %v, %v", r, err)
	}
	founding := k.annotation(t, "etcd-0", FoundingAnnotation)
	for _, n := range []string{"etcd-0", "etcd-1", "etcd-2"} {
		if s := k.state(t, n); s != StateNew || r[n] != Founded || founding == "" || k.annotation(t, n, FoundingAnnotation) != founding {
			t.Errorf("%s told %q (%q), want new, of the founding %q", n, s, r[n], founding)
		}
		if c := k.annotation(t, n, ClusterAnnotation); c != initialCluster(kp.cfg.Peers) {
			t.Errorf("%s told to found %q; want every member", n, c)
		}
	}
}

// takesUpAFoundingCutShort: a founding that told one member pod new (its
// etcd runs, alone) before the keeper's leader went is finished by the
// next pass, and only with pods of that founding or waiting.
func takesUpAFoundingCutShort(t *testing.T, k *kube) {
	kp := k.keeper(t, deadEtcd(t), fakePeers(t))
	k.pod(t, "etcd-0", started)
	k.annotate(t, "etcd-0", map[string]string{StateAnnotation: StateNew, FoundingAnnotation: "f1"})
	k.pod(t, "etcd-1", gated)
	k.pod(t, "etcd-2", gated)
	r, err := kp.Pass(context.Background())
	if err != nil || len(r) != 2 {
		t.Fatalf("a pass after a founding cut short: %v, %v", r, err)
	}
	for _, n := range []string{"etcd-1", "etcd-2"} {
		if s, f := k.state(t, n), k.annotation(t, n, FoundingAnnotation); s != StateNew || f != "f1" {
			t.Errorf("%s told %q of the founding %q; want new of f1", n, s, f)
		}
	}
}

// nothingChangesWithoutQuorum: a member that lost its data while etcd
// has no quorum and other members have run is told nothing: founding a
// new cluster would lose every lock, and the pass says so.
func nothingChangesWithoutQuorum(t *testing.T, k *kube) {
	kp := k.keeper(t, deadEtcd(t), fakePeers(t))
	k.pod(t, "etcd-0", started)
	k.pod(t, "etcd-1", gated)
	k.pod(t, "etcd-2", started)
	// etcd-0's mark of a founding long over: it counts for nothing.
	k.annotate(t, "etcd-0", map[string]string{StateAnnotation: StateNew})
	if r, err := kp.Pass(context.Background()); err != nil || len(r) != 0 {
		t.Fatalf("a pass without quorum: %v, %v; want nothing done", r, err)
	}
	if s := k.state(t, "etcd-1"); s != "" {
		t.Fatalf("etcd-1 told %q without quorum", s)
	}
}

// replacesAMemberThatLostItsData: one member of a running 3-member etcd
// loses its data and its pod comes back at the gate. The keeper removes it,
// adds it back as a learner and tells it to join; etcd started as the
// chart starts it (existing, the same --initial-cluster) catches up and is
// promoted. The members' key-value hashes agree, the lock held throughout
// is still held with its fence, and a new lock's fence is above it.
func replacesAMemberThatLostItsData(t *testing.T, k *kube) {
	ms, peers, cli := cluster(t)
	for _, m := range ms {
		k.pod(t, m.name, started)
	}
	// With authentication, as the chart's etcd: the keeper is its root.
	cli = withAuth(t, cli, ms)
	kp := k.keeper(t, cli, peers)
	ctx := context.Background()
	// The founding's mark goes once etcd has a quorum.
	k.annotate(t, "etcd-0", map[string]string{StateAnnotation: StateNew, FoundingAnnotation: "f1"})
	if r, err := kp.Pass(ctx); err != nil || len(r) != 0 {
		t.Fatalf("a pass on a healthy cluster: %v, %v", r, err)
	}
	if f := k.annotation(t, "etcd-0", FoundingAnnotation); f != "" {
		t.Fatalf("the founding's mark %q left on a cluster with a quorum", f)
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	held := concurrency.NewMutex(sess, "/locks/held")
	if err := held.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	kv, err := cli.Get(ctx, held.Key())
	if err != nil || len(kv.Kvs) != 1 {
		t.Fatalf("the held lock's key: %+v, %v", kv, err)
	}
	fence := kv.Kvs[0].CreateRevision

	before, _ := cli.MemberList(ctx)
	var oldID uint64
	for _, m := range before.Members {
		if m.Name == "etcd-2" {
			oldID = m.ID
		}
	}
	ms[2].stop()
	if err := os.RemoveAll(ms[2].dir); err != nil {
		t.Fatal(err)
	}
	// Its pod's gate has just started: it may find data; nothing yet.
	k.pod(t, "etcd-2", gating)
	if r, err := kp.Pass(ctx); err != nil || len(r) != 0 {
		t.Fatalf("a pass while etcd-2's gate has just started: %v, %v", r, err)
	}
	k.status(t, "etcd-2", gated)
	until(t, 30*time.Second, "etcd-2 told to join", func() error { _, err := kp.Pass(ctx); return err },
		func() bool { return k.state(t, "etcd-2") == StateExisting })
	list, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var learner bool
	for _, m := range list.Members {
		if m.ID == oldID {
			t.Fatalf("the member that lost its data (%x) is still listed", oldID)
		}
		learner = learner || (m.IsLearner && slices.Contains(m.PeerURLs, ms[2].peer))
	}
	if !learner || len(list.Members) != 3 {
		t.Fatalf("members after the replacement: %+v; want etcd-2's peer URL as a learner", list.Members)
	}
	if _, err := cli.Put(ctx, "/written/while/replacing", "x"); err != nil {
		t.Fatalf("a write while etcd-2 is a learner: %v", err)
	}

	// The pod's etcd starts as the chart starts it. The keeper's client
	// now reaches a follower only: the promotion must go to the leader
	// all the same, since a follower forwards it without the caller's
	// identity, which etcd refuses.
	joinAs := k.annotation(t, "etcd-2", ClusterAnnotation)
	if !sameCluster(joinAs, initialCluster(peers)) {
		t.Errorf("etcd-2 told to join as %q; want the three members, %q", joinAs, initialCluster(peers))
	}
	ms[2].start(t, joinAs, StateExisting)
	k.status(t, "etcd-2", started)
	fkp := k.keeper(t, rootClient(t, ms[0].certs, follower(t, cli, ms[:2]).client), peers)
	until(t, 60*time.Second, "etcd-2 promoted", func() error { _, err := fkp.Pass(ctx); return err }, func() bool {
		l, err := cli.MemberList(ctx)
		if err != nil || len(l.Members) != 3 {
			return false
		}
		for _, m := range l.Members {
			if m.IsLearner || m.Name == "" {
				return false
			}
		}
		return true
	})

	// Every member holds the same keys at the same revision.
	put, err := cli.Put(ctx, "/after", "x")
	if err != nil {
		t.Fatal(err)
	}
	rev := put.Header.Revision
	var hashes []uint32
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		hashes = hashes[:0]
		for _, m := range ms {
			h, err := cli.HashKV(ctx, m.client, rev)
			if err != nil {
				break
			}
			hashes = append(hashes, h.Hash)
		}
		if len(hashes) == 3 && hashes[0] == hashes[1] && hashes[1] == hashes[2] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the members' hashes at revision %d: %v", rev, hashes)
		}
	}

	got, err := cli.Get(ctx, held.Key())
	if err != nil || len(got.Kvs) != 1 || got.Kvs[0].CreateRevision != fence {
		t.Fatalf("the lock held throughout: %+v, %v; want its key at create revision %d", got, err, fence)
	}
	next := concurrency.NewMutex(sess, "/locks/next")
	if err := next.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if next.Header().Revision <= fence {
		t.Fatalf("a new lock's fence %d, not above %d", next.Header().Revision, fence)
	}
}

// withAuth turns etcd's authentication on, with a root user who signs
// in with its certificate (as the chart's controller does), and returns a
// client of the root user in place of cli.
func withAuth(t *testing.T, cli *clientv3.Client, ms []*member) *clientv3.Client {
	t.Helper()
	ctx := context.Background()
	if _, err := cli.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.client)
	}
	return rootClient(t, ms[0].certs, eps...)
}

// rootClient is a client of etcd's root user at endpoints, by its
// certificate of c.
func rootClient(t *testing.T, c *testCerts, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: c.root, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// follower returns one of ms that does not lead.
func follower(t *testing.T, cli *clientv3.Client, ms []*member) *member {
	t.Helper()
	for _, m := range ms {
		st, err := cli.Status(context.Background(), m.client)
		if err == nil && st.Leader != st.Header.MemberId {
			return m
		}
	}
	t.Fatal("every member asked leads")
	return nil
}

// growsOneMemberBackToThree: etcd restored from a snapshot into one
// member's volume runs alone; the other members' pods start on new, empty
// volumes. The keeper adds them back one at a time, each told to join with
// the members etcd has then, and promotes each: three voting members hold
// what the one restored did.
func growsOneMemberBackToThree(t *testing.T, k *kube) {
	ms, peers := members(t)
	ms[0].start(t, peers[0].Name+"="+peers[0].URL, StateNew)
	select {
	case <-ms[0].e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("the restored member not ready in 30s")
	}
	cli := withAuth(t, rootClient(t, ms[0].certs, ms[0].client), ms[:1])
	ctx := context.Background()
	if _, err := cli.Put(ctx, "/restored", "x"); err != nil {
		t.Fatal(err)
	}
	k.pod(t, "etcd-0", started)
	k.pod(t, "etcd-1", gated)
	k.pod(t, "etcd-2", gated)
	kp := k.keeper(t, cli, peers)
	for i := 1; i < 3; i++ {
		name := peers[i].Name
		until(t, 60*time.Second, name+" told to join", func() error { _, err := kp.Pass(ctx); return err },
			func() bool { return k.state(t, name) == StateExisting })
		joinAs := k.annotation(t, name, ClusterAnnotation)
		if want := initialCluster(peers[:i+1]); !sameCluster(joinAs, want) {
			t.Fatalf("%s told to join as %q; want %q", name, joinAs, want)
		}
		if i == 1 && k.state(t, "etcd-2") != "" {
			t.Fatal("etcd-2 told to join before etcd-1 was a voting member")
		}
		ms[i].start(t, joinAs, StateExisting)
		k.status(t, name, started)
		until(t, 60*time.Second, name+" promoted", func() error { _, err := kp.Pass(ctx); return err }, func() bool {
			l, err := cli.MemberList(ctx)
			if err != nil || len(l.Members) != i+1 {
				return false
			}
			for _, m := range l.Members {
				if m.IsLearner || m.Name == "" {
					return false
				}
			}
			return true
		})
	}
	for _, m := range ms {
		got, err := rootClient(t, m.certs, m.client).Get(ctx, "/restored", clientv3.WithSerializable())
		if err != nil || len(got.Kvs) != 1 {
			t.Errorf("member %s holds %+v, %v; want the restored key", m.name, got, err)
		}
	}
}
