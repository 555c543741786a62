package etcdstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

// TestPermissionDenied: on an etcd with authentication on, a store whose
// user may use one prefix is refused another, by CheckAccess (writing
// nothing) and by each operation, with an error naming the user and the
// keys; once the role grants the prefix, both pass and Denied clears.
func TestPermissionDenied(t *testing.T) {
	const mine, theirs = "/baton/v1/team-a/", "/baton/v1/team-b/"
	sec, cli, s := secureStore(t, "team-a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sec.Grant(ctx, "team-a", mine); err != nil {
		t.Fatal(err)
	}

	if err := s.CheckAccess(ctx, mine); err != nil {
		t.Fatalf("own prefix: %v", err)
	}
	err := s.CheckAccess(ctx, theirs)
	if !errors.Is(err, lockstore.ErrPermissionDenied) || !strings.Contains(err.Error(), `"team-a"`) || !strings.Contains(err.Error(), theirs) {
		t.Fatalf("another prefix: %v; want ErrPermissionDenied naming team-a and %s", err, theirs)
	}
	if d := s.Refused(); d == nil {
		t.Error("Denied is nil after a refusal")
	}
	// The probe wrote nothing, anywhere.
	if r, err := sec.Root().Get(ctx, "/baton/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 0 {
		t.Errorf("keys after the checks: %v %v, want none", r, err)
	}

	l, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := keyspace.ParseKey("job")
	layout, _ := keyspace.NewLayout("team-b")
	put := lockstore.Put{Key: layout.ContenderKey(k, int64(l.ID)), Lease: lockstore.LeaseID(l.ID), Record: keyspace.Holder{Owner: "o"}}
	if _, err := s.Try(layout.LockPrefix(k), put); !errors.Is(err, lockstore.ErrPermissionDenied) || !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("Try on another scope: %v, want permission denied", err)
	}
	if _, _, err := s.Contenders(ctx, theirs, 0); !errors.Is(err, lockstore.ErrPermissionDenied) {
		t.Errorf("read of another scope: %v, want permission denied", err)
	}
	w := s.Watch(ctx, theirs, 0)
	if r := <-w; !errors.Is(r.Err, lockstore.ErrPermissionDenied) {
		t.Errorf("watch of another scope: %+v, want permission denied", r)
	}

	if err := sec.Grant(ctx, "team-a", theirs); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckAccess(ctx, theirs); err != nil {
		t.Fatalf("after the grant: %v", err)
	}
	if d := s.Refused(); d != nil {
		t.Errorf("Refused after an allowed check: %v", d)
	}
	if out, err := s.Try(layout.LockPrefix(k), put); err != nil || !out.OK {
		t.Errorf("Try after the grant: %+v %v", out, err)
	}
}

// TestFollow: Follow reports a key's value at start and after each put
// and delete, and a refusal naming the user and the key; once the role
// grants the key, it follows it.
func TestFollow(t *testing.T) {
	sec, cli, s := secureStore(t, "team-a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, _ := keyspace.NewLayout("team-a")
	type seen struct {
		value string
		gone  bool
		err   error
	}
	got := make(chan seen, 16)
	fctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Follow(fctx, l.Policy(), 50*time.Millisecond, Follower{
			Set:  func(v []byte, _ int64) { got <- seen{value: string(v), gone: v == nil} },
			Fail: func(err error) { got <- seen{err: err} },
		})
	}()
	defer func() { stop(); <-done }()
	next := func() seen {
		t.Helper()
		select {
		case g := <-got:
			return g
		case <-ctx.Done():
			t.Fatal("Follow told nothing")
			return seen{}
		}
	}
	if g := next(); !errors.Is(g.err, lockstore.ErrPermissionDenied) || !strings.Contains(g.err.Error(), `"team-a" may not read "/baton/v1/team-a/policy"`) {
		t.Fatalf("before the grant: %+v", g)
	}
	if err := sec.GrantScope(ctx, "team-a", "team-a"); err != nil {
		t.Fatal(err)
	}
	for g := next(); !g.gone; g = next() {
		if g.err == nil {
			t.Fatalf("a value before any was written: %+v", g)
		}
	}
	if _, err := sec.Root().Put(ctx, l.Policy(), "v1"); err != nil {
		t.Fatal(err)
	}
	if g := next(); g.value != "v1" {
		t.Fatalf("after the put: %+v", g)
	}
	if _, err := sec.Root().Delete(ctx, l.Policy()); err != nil {
		t.Fatal(err)
	}
	if g := next(); !g.gone {
		t.Fatalf("after the delete: %+v", g)
	}
	// The sidecar's role reads its policy and may not write it.
	if _, err := cli.Put(ctx, l.Policy(), "mine"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("a sidecar wrote its own policy: %v", err)
	}
}

// secureStore starts an etcd with TLS and authentication and returns it,
// a client authenticated by the certificate of user (who is granted
// nothing yet) and a Store on that client; all go when the test ends.
func secureStore(t *testing.T, user string) (*etcdtest.Secure, *clientv3.Client, *Store) {
	t.Helper()
	sec, err := etcdtest.StartSecure()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sec.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sec.AddUser(ctx, user, ""); err != nil {
		t.Fatal(err)
	}
	cli, err := sec.Client(user, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return sec, cli, New(cli, 5*time.Second, User(user))
}
