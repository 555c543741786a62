package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"unicode/utf8"

	"github.com/baton-dev/baton/internal/keyspace"
)

// Proclaim changes what the leader of election k announces, as etcd's
// Election.Proclaim does: owner, leading k through this sidecar, writes
// value into its key's record, comparing the key's create revision, so
// that a leadership lost meanwhile is never written to, and every
// observer sees the new value at the revision of the write. The
// leadership keeps its fence. Only a coordinator of elections proclaims.
func (c *Coordinator) Proclaim(ctx context.Context, k keyspace.Key, owner, value string) (Grant, error) {
	op := fmt.Sprintf("proclaim %q", k)
	switch {
	case c.cfg.Space != keyspace.Elections:
		return Grant{}, fmt.Errorf("%s: %w", op, invalid("value", "only the leader of an election proclaims a value; a lock has none"))
	case len(value) > keyspace.MaxValue:
		return Grant{}, fmt.Errorf("%s: %w", op, invalid("value", "is %d bytes long, at most %d are allowed", len(value), keyspace.MaxValue))
	case !utf8.ValidString(value):
		return Grant{}, fmt.Errorf("%s: %w", op, invalid("value", "is not valid UTF-8"))
	}
	return c.change(ctx, k, owner, change{op: op, value: &value, level: slog.LevelInfo})
}
