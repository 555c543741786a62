package access

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/baton-dev/baton/internal/pki"
)

// The controller's Secrets are governed by Roles the chart writes by
// hand, limited by name (RBAC markers cannot say resourceNames): it never
// lists or reads Secrets it did not make.

// retry is the pause after a failed step of the leader's loop.
const retry = 2 * time.Second

// Keeper keeps etcd's certificates and users (see the package comment).
type Keeper struct {
	cfg  Config
	ca   *pki.CA
	c    client.Client // reads and writes Secrets directly, never from a cache
	etcd *clientv3.Client
	now  func() time.Time
	log  logr.Logger
}

// Prepare loads the CA (making it on the first start) and makes sure
// etcd's serving certificate is in its Secret, for etcd's pods wait for
// it: it runs before the controller can reach etcd. c reads and writes
// Secrets directly.
func Prepare(ctx context.Context, c client.Client, cfg Config, log logr.Logger) (*Keeper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	k := &Keeper{cfg: cfg, c: c, now: time.Now, log: log.WithName("access")}
	key := client.ObjectKey{Namespace: cfg.Namespace, Name: cfg.CASecret}
	var err error
	if cfg.ExternalCA {
		k.ca, err = k.awaitCA(ctx, key)
	} else {
		k.ca, err = LoadCA(ctx, c, key, k.now())
	}
	if err != nil {
		return nil, err
	}
	// Another replica may write the Secret at the same time: once more.
	if _, err := k.keepServer(ctx); err != nil {
		if _, err = k.keepServer(ctx); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// awaitCA reads the CA that another keeps in Secret key, waiting for it
// to be made, until ctx ends.
func (k *Keeper) awaitCA(ctx context.Context, key client.ObjectKey) (*pki.CA, error) {
	var said time.Time
	for ; ; sleep(ctx, time.Second) {
		var s corev1.Secret
		err := k.c.Get(ctx, key, &s)
		if err == nil {
			ca, err := pki.ParseCA(s.Data[keyCert], s.Data[keyKey])
			if err != nil {
				return nil, fmt.Errorf("the CA Secret %s: %w", key, err)
			}
			return ca, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("read the CA Secret %s: %w", key, err)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("the CA Secret %s was never made (by cert-manager?): %w", key, ctx.Err())
		}
		if time.Since(said) > 10*time.Second {
			k.log.Info("waiting for the CA Secret, which cert-manager makes", "secret", key)
			said = time.Now()
		}
	}
}

// ClientTLS is the controller's own TLS configuration for etcd: it trusts
// the CA and authenticates as etcd's root user.
func (k *Keeper) ClientTLS() *tls.Config {
	return ClientTLS(k.ca, RootUser, k.cfg.Validity, k.now)
}

// Connect gives the Keeper the etcd client made with ClientTLS.
func (k *Keeper) Connect(cli *clientv3.Client) { k.etcd = cli }

// Ensure gives namespace ns its credentials: its scope's etcd user and
// role, and the Secret with its client certificate, made or renewed when
// due. The injector calls it for each pod it injects (so that the Secret
// is there before the pod), and the leader's loop for every namespace that
// has them. It returns when they are next due.
func (k *Keeper) Ensure(ctx context.Context, ns string) (time.Time, error) {
	key := client.ObjectKey{Namespace: ns, Name: k.cfg.ClientSecret}
	// Commonly the Secret is current: one read, no etcd request.
	return KeepCert(ctx, k.c, k.ca, key, clientRequest(ScopeUser(ns), k.cfg.Validity), k.now(), func() error {
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := EnsureScope(ectx, k.etcd, ns)
		return err
	})
}

// Setup adds to mgr, to run on the leader: etcd's authentication turned
// on, then, every resync or sooner when something is due, etcd's
// certificate and every namespace's credentials renewed (and a deleted
// Secret made again). The namespaces are those with a scope user in etcd:
// etcd is the register, so the controller needs no right to list Secrets.
func (k *Keeper) Setup(mgr manager.Manager) error {
	if k.etcd == nil {
		return fmt.Errorf("the etcd access keeper has no etcd client (Connect)")
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		k.lead(ctx)
		return nil
	})); err != nil {
		return fmt.Errorf("add the etcd access keeper: %w", err)
	}
	return nil
}

// lead turns etcd's authentication on, then keeps the certificates, until
// ctx ends.
func (k *Keeper) lead(ctx context.Context) {
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := EnableAuth(rctx, k.etcd)
		cancel()
		if err == nil {
			k.log.Info("etcd's authentication is on; the controller is its root user")
			break
		}
		k.log.Info("cannot turn etcd's authentication on yet", "err", err)
		sleep(ctx, retry)
	}
	// Each term of leadership brings every scope's etcd role up to what
	// this version's sidecars need (an upgrade may grant them more keys),
	// once: a namespace whose certificate is current costs no etcd request
	// otherwise.
	current := map[string]bool{}
	for ctx.Err() == nil {
		next := k.now().Add(k.cfg.Resync)
		if err := k.keepAll(ctx, &next, current); err != nil {
			k.log.Error(err, "keeping etcd's certificates")
			next = k.now().Add(retry)
		}
		sleep(ctx, next.Sub(k.now()))
	}
}

// keepAll keeps etcd's certificate and every namespace's, lowering next to
// the earliest due, and brings the roles of the scopes not in current up
// to date.
func (k *Keeper) keepAll(ctx context.Context, next *time.Time, current map[string]bool) error {
	due, err := k.keepServer(ctx)
	if err != nil {
		return err
	}
	*next = earliest(*next, due)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	users, err := k.etcd.UserList(rctx)
	cancel()
	if err != nil {
		return fmt.Errorf("list etcd's users: %w", err)
	}
	var errs []error
	for _, u := range users.Users {
		ns, ok := strings.CutPrefix(u, scopeUserPrefix)
		if !ok {
			continue
		}
		if gone, err := k.forgetIfGone(ctx, ns); gone || err != nil {
			errs = append(errs, err)
			continue
		}
		if !current[ns] {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := EnsureScope(rctx, k.etcd, ns)
			cancel()
			if err != nil {
				errs = append(errs, fmt.Errorf("namespace %s: %w", ns, err))
				continue
			}
			current[ns] = true
		}
		due, err := k.Ensure(ctx, ns)
		if err != nil {
			errs = append(errs, fmt.Errorf("namespace %s: %w", ns, err))
			continue
		}
		*next = earliest(*next, due)
	}
	return errors.Join(errs...)
}

// forgetIfGone deletes the etcd user and role of namespace ns when the
// namespace is gone (its Secret went with it).
func (k *Keeper) forgetIfGone(ctx context.Context, ns string) (bool, error) {
	err := k.c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
	if !apierrors.IsNotFound(err) {
		return false, err
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := ForgetScope(rctx, k.etcd, ns); err != nil {
		return true, err
	}
	k.log.Info("namespace gone: its etcd user and role are deleted", "namespace", ns, "user", ScopeUser(ns))
	return true, nil
}

// keepServer keeps etcd's certificate in its Secret, returning when it is
// next due.
func (k *Keeper) keepServer(ctx context.Context) (time.Time, error) {
	if k.cfg.ServerSecret == "" {
		return k.now().Add(k.cfg.Resync), nil // cert-manager's
	}
	key := client.ObjectKey{Namespace: k.cfg.Namespace, Name: k.cfg.ServerSecret}
	return KeepCert(ctx, k.c, k.ca, key, serverRequest(k.cfg.ServerNames, k.cfg.Validity), k.now())
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
