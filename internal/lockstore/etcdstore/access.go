package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/lockstore"
)

// User names the etcd user the store's client authenticates as, for the
// errors that say what etcd refused to whom: a user name, or a client
// certificate's common name. Empty: the client sends no credentials.
func User(name string) Option { return func(s *Store) { s.user = name } }

// accessProbe is the key under a prefix that CheckAccess asks to write,
// and never writes: no lock is named with a NUL byte.
const accessProbe = "\x00access-probe"

// CheckAccess implements lockstore.Store in one transaction whose compare
// never holds: etcd checks the permission of every operation of both
// branches before it evaluates the compare, so a user without read or
// write access under any of the prefixes is refused, and nothing is
// written.
func (s *Store) CheckAccess(ctx context.Context, prefixes ...string) error {
	var then, els []clientv3.Op
	for _, prefix := range prefixes {
		then = append(then, clientv3.OpPut(prefix+accessProbe, ""))
		els = append(els, clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly()))
	}
	_, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(prefixes[0]+accessProbe), "<", 0)).
		Then(then...).
		Else(els...).
		Commit()
	if err == nil {
		s.lastDenied.Store(nil)
	}
	return s.denied(err, strings.Join(prefixes, `", "`))
}

// Denied implements lockstore.Store.
func (s *Store) Denied() error {
	if p := s.lastDenied.Load(); p != nil {
		return *p
	}
	return nil
}

// denied is err, wrapped in lockstore.ErrPermissionDenied with the user
// and the key when etcd refused the user (or asked for one), and
// remembered for Denied.
func (s *Store) denied(err error, key string) error {
	if err == nil {
		return nil
	}
	if !isDenial(err) {
		return err
	}
	who := "an etcd client without a user (etcd's authentication is on: give it a user or a client certificate)"
	if s.user != "" {
		who = fmt.Sprintf("etcd user %q", s.user)
	}
	err = fmt.Errorf("%w: %s may not read and write %q: %w", lockstore.ErrPermissionDenied, who, key, err)
	s.lastDenied.Store(&err)
	return err
}

// isDenial reports whether err is etcd refusing a user, or a client
// without one. A watch that etcd
// cancels says why only in text (its cancel reason is the gRPC status
// error's text), so that is read too.
func isDenial(err error) bool {
	for _, d := range []error{rpctypes.ErrPermissionDenied, rpctypes.ErrUserEmpty, rpctypes.ErrAuthFailed} {
		if errors.Is(err, d) || strings.HasSuffix(err.Error(), d.Error()) {
			return true
		}
	}
	return false
}
