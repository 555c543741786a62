package highwater

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore/etcdstore"
)

// writeFloors raises the fence floor of every scope to floor, and returns
// how many it raised.
func (k *Keeper) writeFloors(ctx context.Context, floor int64) (int, error) {
	scopes, err := k.scopes(ctx)
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, s := range scopes {
		l, err := keyspace.NewLayout(s)
		if err != nil {
			continue // a namespace name that is not a scope: no sidecar uses it
		}
		if err := etcdstore.RaiseFloorKey(ctx, k.etcd, l.Floor(), floor, k.cfg.RequestTimeout); err != nil {
			errs = append(errs, fmt.Errorf("scope %s: %w", s, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// scopes returns the configured scopes, or else every namespace, every
// scope that has keys in etcd, and every scope seen there before (kept in
// the ConfigMap): a scope no namespace names, such as a sidecar's own
// --scope, is found in etcd, and remembered past etcd's loss.
func (k *Keeper) scopes(ctx context.Context) ([]string, error) {
	if len(k.cfg.Scopes) > 0 {
		return k.cfg.Scopes, nil
	}
	var nss corev1.NamespaceList
	if err := k.read.List(ctx, &nss); err != nil {
		return nil, fmt.Errorf("list the namespaces: %w", err)
	}
	out := make([]string, 0, len(nss.Items))
	for _, ns := range nss.Items {
		out = append(out, ns.Name)
	}
	inEtcd, err := k.etcdScopes(ctx)
	if err != nil {
		return nil, err
	}
	return merge(merge(out, inEtcd), k.seen), nil
}

// etcdScopes lists the scopes that have keys in etcd, one read each: the
// next read starts past the last scope's keys.
func (k *Keeper) etcdScopes(ctx context.Context) ([]string, error) {
	var out []string
	end := clientv3.GetPrefixRangeEnd(keyspace.Root)
	from := keyspace.Root
	for {
		gctx, cancel := context.WithTimeout(ctx, k.cfg.RequestTimeout)
		resp, err := k.etcd.Get(gctx, from, clientv3.WithRange(end), clientv3.WithLimit(1), clientv3.WithKeysOnly())
		cancel()
		if err != nil {
			return nil, fmt.Errorf("list the scopes in etcd: %w", err)
		}
		if len(resp.Kvs) == 0 {
			return out, nil
		}
		rest := strings.TrimPrefix(string(resp.Kvs[0].Key), keyspace.Root)
		scope, _, found := strings.Cut(rest, "/")
		if found {
			out = append(out, scope)
		}
		// Past every key of the scope: "/" is followed by "0" in byte order.
		from = keyspace.Root + scope + "0"
		if !found {
			from = keyspace.Root + rest + "\x00"
		}
	}
}
