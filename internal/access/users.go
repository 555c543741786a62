package access

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/keyspace"
)

// ScopeUser is the etcd user (and role) of a scope's sidecars, the common
// name of their client certificate. The prefix keeps every scope's user
// apart from root.
func ScopeUser(scope string) string { return scopeUserPrefix + scope }

const scopeUserPrefix = "baton-scope-"

// EnableAuth turns etcd's authentication on, with the root user (which
// authenticates by a client certificate named root, having no password)
// in the root role. It does nothing when authentication is on.
func EnableAuth(ctx context.Context, cli *clientv3.Client) error {
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("etcd auth status: %w", err)
	}
	if st.Enabled {
		return nil
	}
	if err := ensureUser(ctx, cli, RootUser); err != nil {
		return err
	}
	if _, err := cli.UserGrantRole(ctx, RootUser, "root"); err != nil {
		return fmt.Errorf("grant etcd's root role to %s: %w", RootUser, err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("enable etcd's authentication: %w", err)
	}
	return nil
}

// EnsureScope makes the etcd user and role of scope, the role granting
// exactly what its sidecars need (keyspace.Layout.SidecarGrants), and
// returns the user.
func EnsureScope(ctx context.Context, cli *clientv3.Client, scope string) (string, error) {
	l, err := keyspace.NewLayout(scope)
	if err != nil {
		return "", err
	}
	user := ScopeUser(scope)
	if err := ensureUser(ctx, cli, user); err != nil {
		return "", err
	}
	role, err := cli.RoleGet(ctx, user)
	if errors.Is(err, rpctypes.ErrRoleNotFound) {
		if _, err = cli.RoleAdd(ctx, user); err == nil {
			role, err = cli.RoleGet(ctx, user)
		}
	}
	if err != nil {
		return "", fmt.Errorf("etcd role %s: %w", user, err)
	}
	for _, g := range l.SidecarGrants() {
		perm := clientv3.PermissionType(clientv3.PermRead)
		if g.Write {
			perm = clientv3.PermissionType(clientv3.PermReadWrite)
		}
		if granted(role.Perm, g.Key, g.RangeEnd, authpb.Permission_Type(perm)) {
			continue
		}
		if _, err := cli.RoleGrantPermission(ctx, user, g.Key, g.RangeEnd, perm); err != nil {
			return "", fmt.Errorf("grant etcd role %s %s: %w", user, g.Key, err)
		}
	}
	if _, err := cli.UserGrantRole(ctx, user, user); err != nil {
		return "", fmt.Errorf("grant etcd role %s to its user: %w", user, err)
	}
	return user, nil
}

// ForgetScope deletes the etcd user and role of scope, if they exist.
func ForgetScope(ctx context.Context, cli *clientv3.Client, scope string) error {
	user := ScopeUser(scope)
	if _, err := cli.UserDelete(ctx, user); err != nil && !errors.Is(err, rpctypes.ErrUserNotFound) {
		return fmt.Errorf("delete etcd user %s: %w", user, err)
	}
	if _, err := cli.RoleDelete(ctx, user); err != nil && !errors.Is(err, rpctypes.ErrRoleNotFound) {
		return fmt.Errorf("delete etcd role %s: %w", user, err)
	}
	return nil
}

// ensureUser adds user, with no password (it authenticates by its
// certificate's common name), unless it exists.
func ensureUser(ctx context.Context, cli *clientv3.Client, user string) error {
	_, err := cli.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true})
	if err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("add etcd user %s: %w", user, err)
	}
	return nil
}

func granted(perms []*authpb.Permission, key, end string, t authpb.Permission_Type) bool {
	for _, p := range perms {
		if string(p.Key) == key && string(p.RangeEnd) == end && p.PermType == t {
			return true
		}
	}
	return false
}
