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
// written. Its write branch costs space, so that etcd refuses it too while
// its NOSPACE alarm is raised: asked again, it says when the alarm is gone.
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
		s.lastRefused.Store(nil)
	}
	return s.refusal(err, strings.Join(prefixes, `", "`))
}

// Refused implements lockstore.Store.
func (s *Store) Refused() error {
	if p := s.lastRefused.Load(); p != nil {
		return *p
	}
	return nil
}

// refusal is err, wrapped in lockstore.ErrPermissionDenied with the user
// and the key when etcd refused the user (or asked for one), or in
// lockstore.ErrNoSpace or ErrCorrupt when etcd refused it for an alarm,
// and then remembered for Refused.
func (s *Store) refusal(err error, key string) error {
	a := alarm(err)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lockstore.ErrPermissionDenied):
	case a != nil:
		err = a
	case is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("%w: %w", lockstore.ErrLeaseGone, err)
	case isDenial(err):
		who := "an etcd client without a user (etcd's authentication is on: give it a user or a client certificate)"
		if s.user != "" {
			who = fmt.Sprintf("etcd user %q", s.user)
		}
		err = fmt.Errorf("%w: %s may not read and write %q: %w", lockstore.ErrPermissionDenied, who, key, err)
	default:
		return err
	}
	s.lastRefused.Store(&err)
	return err
}

// alarm is err wrapped in lockstore.ErrNoSpace or ErrCorrupt when etcd
// refused it for its NOSPACE or CORRUPT alarm, else nil.
func alarm(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lockstore.ErrNoSpace) || errors.Is(err, lockstore.ErrCorrupt):
		return err
	case is(err, rpctypes.ErrNoSpace):
		return fmt.Errorf("%w: %w", lockstore.ErrNoSpace, err)
	case is(err, rpctypes.ErrCorrupt):
		return fmt.Errorf("%w: %w", lockstore.ErrCorrupt, err)
	}
	return nil
}

// isDenial reports whether err is etcd refusing a user, or a client
// without one.
func isDenial(err error) bool {
	return is(err, rpctypes.ErrPermissionDenied, rpctypes.ErrUserEmpty, rpctypes.ErrAuthFailed)
}

// is reports whether err is one of etcd's errors. A watch that etcd
// cancels says why only in text (its cancel reason is the gRPC status
// error's text), so that is read too.
func is(err error, errs ...error) bool {
	if err == nil {
		return false
	}
	for _, d := range errs {
		if errors.Is(err, d) || strings.HasSuffix(err.Error(), d.Error()) {
			return true
		}
	}
	return false
}
