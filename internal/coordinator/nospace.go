package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// ErrNoSpace is etcd refusing every write that adds data because its
// NOSPACE alarm is raised: no lock is granted until room is made and the
// alarm disarmed, while the locks held go on. It comes wrapped in
// ErrUnavailable.
var ErrNoSpace = lockstore.ErrNoSpace

// ErrCorrupt is etcd refusing everything because its CORRUPT alarm is
// raised. It comes wrapped in ErrUnavailable.
var ErrCorrupt = lockstore.ErrCorrupt

// noSpaceHint says what etcd out of space means for a caller, and what
// makes room.
const noSpaceHint = "the locks held go on (their holders may extend and release them), but none is granted " +
	"until etcd's history is compacted, its members defragmented and the alarm disarmed, " +
	"which Baton does itself (docs/operations.md, \"etcd out of space\")"

// extendHere moves h's deadline to exp in this sidecar alone, when etcd,
// out of space, refused to write it into the lock's record (cause). The
// deadline is this sidecar's to keep (it deletes the key when it passes),
// and the key is still the holder's: a read says so, and the session's
// lease that carries it lives on, since etcd takes keep-alives while its
// alarm is raised. So a hold stream, or a job that extends its lock, keeps
// it. The record in etcd keeps the deadline it had until etcd takes writes
// again (the record is written then, tried every recordRetry): other
// sidecars, watches and Lock objects show that one meanwhile, and a
// sidecar that restarts meanwhile keeps the later one of its state file.
func (h *held) extendHere(ctx context.Context, k keyspace.Key, op string, exp time.Time, ttl time.Duration, level slog.Level, cause error) (Grant, error) {
	c := h.entry.co
	e := h.entry
	tctx, cancel := c.cfg.etcdCtx(ctx)
	mine, err := c.store.lines.Holds(tctx, h.etcdKey, h.fence)
	cancel()

	c.mu.Lock()
	defer c.unlock()
	h.settleLocked()
	switch {
	case err != nil:
		return Grant{}, unavailable(op, cause)
	case e.held != h:
		if lost := c.ended.lost(c.now(), k, h.owner); lost != nil {
			return Grant{}, fmt.Errorf("%s: %w", op, lost)
		}
		return Grant{}, fmt.Errorf("%s: %w", op, ErrNotHeld)
	case !mine:
		h.loseLocked(goneReason(h.sess))
		e.passTurnLocked()
		return Grant{}, fmt.Errorf("%s: %w", op, c.ended.lost(c.now(), k, h.owner))
	}
	e.recLocked() // what etcd has: the record with the deadline before
	h.goneAfterLocked(0)
	h.expiresAt, h.ttl = exp.UTC(), ttl
	c.deadlines.arm(h, h.expiresAt.Sub(c.now()))
	h.changedLocked(false)
	// Written into the record once etcd takes writes again, tried every
	// recordRetry until then.
	e.publishAfterLocked(recordRetry)
	if level < slog.LevelWarn {
		level += slog.LevelInfo - slog.LevelDebug // Renew's debug: info; Extend's info: warn
	}
	c.log.Log(ctx, level, "lock extended in this sidecar only: etcd is out of space, and the lock's record keeps its earlier deadline",
		"lock", k.String(), "owner", h.owner, "fence", h.fence, "expiresAt", h.expiresAt)
	return grantOf(e, h), nil
}
