package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
)

// The lock routes: one handler per operation of the socket API.

// lock routes /v1/locks/{key}[:verb].
func (s *Server) lock(w http.ResponseWriter, r *http.Request, rest string) {
	name, verb, hasVerb := strings.Cut(rest, ":")
	k, err := keyspace.ParseKey(name)
	if err != nil {
		writeError(w, err)
		return
	}
	switch {
	case !hasVerb && r.Method == http.MethodPost:
		s.acquire(w, r, k)
	case !hasVerb && r.Method == http.MethodDelete:
		s.release(w, r, k)
	case !hasVerb && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		s.status(w, r, k)
	case !hasVerb:
		notAllowed(w, r, "GET, POST, DELETE")
	case verb == "extend" && r.Method == http.MethodPost:
		s.extend(w, r, k)
	case verb == "hold" && r.Method == http.MethodPost:
		s.hold(w, r, k)
	case verb == "extend" || verb == "hold":
		notAllowed(w, r, "POST")
	case verb == "watch":
		s.watch(w, r, k)
	case verb == "done":
		s.done(w, r, k)
	default:
		writeError(w, &apiError{status: http.StatusNotFound, code: lockapi.CodeNotFound,
			msg: fmt.Sprintf("unknown method %q after the key; the custom methods are :extend, :hold, :watch and :done", verb)})
	}
}

func notAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, &apiError{status: http.StatusMethodNotAllowed, code: lockapi.CodeMethodNotAllowed,
		msg: fmt.Sprintf("%s is not allowed on %s; use %s", r.Method, r.URL.Path, allow)})
}

func (s *Server) acquire(w http.ResponseWriter, r *http.Request, k keyspace.Key) {
	b, err := s.body(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	req := b.AcquireRequest
	req.Key, req.Caller = k, callerOf(r.Context())
	g, err := s.co.Acquire(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if g.Repeated {
		writeJSON(w, http.StatusOK, grantOf(g))
		return
	}
	if r.Context().Err() != nil || deliverJSON(w, http.StatusOK, grantOf(g)) != nil {
		// The caller hung up (a client time-out) before it could learn of
		// the grant: nobody would release the lock before its ttl.
		s.co.Keep(context.Background(), g).Release("the caller hung up before the grant reached it")
	}
}

func (s *Server) extend(w http.ResponseWriter, r *http.Request, k keyspace.Key) {
	b, err := s.body(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	switch {
	case b.Owner == "":
		writeError(w, badRequest(lockapi.CodeInvalidOwner, "owner is required to extend a lock"))
		return
	case b.Wait != 0:
		writeError(w, badRequest(lockapi.CodeInvalidWait, "extend takes no wait; send owner and ttl"))
		return
	case b.MaxHold != 0:
		writeError(w, badRequest(lockapi.CodeInvalidMaxHold, "extend takes no max_hold: a hold stream's cap is set when it opens"))
		return
	case b.claimed || b.Once != nil || b.LockDelay != 0 || b.valueGiven:
		writeError(w, badRequest(lockapi.CodeInvalidRequest, "extend takes no mode, limit, weight, lock_delay, once or value: the lock keeps what it was granted with"))
		return
	}
	g, err := s.co.Extend(r.Context(), k, b.Owner, b.TTL)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, grantOf(g))
}

func (s *Server) release(w http.ResponseWriter, r *http.Request, k keyspace.Key) {
	q, err := query(r, "owner", "force", "fence", "by")
	if err != nil {
		writeError(w, err)
		return
	}
	owner := q.Get("owner")
	switch q.Get("force") {
	case "true":
		s.forceRelease(w, r, k, q)
		return
	case "", "false":
	default:
		writeError(w, badRequest(lockapi.CodeInvalidRequest, "force must be true or false"))
		return
	}
	if q.Has("fence") || q.Has("by") {
		writeError(w, badRequest(lockapi.CodeInvalidRequest, "fence and by go with force=true"))
		return
	}
	if owner == "" {
		path := "/v1/locks/KEY"
		if s.electionsServed() {
			path = "/v1/elections/NAME"
		}
		writeError(w, badRequest(lockapi.CodeInvalidOwner, "the owner query parameter is required: DELETE "+path+"?owner=ID (an operator may add force=true instead)"))
		return
	}
	rel, err := s.co.Release(r.Context(), k, owner)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, lockapi.Released{Released: true, Key: k.String(), Owner: owner, Fence: rel.Fence,
		HeldFor: rel.HeldFor.Round(time.Millisecond).String(), HeldSeconds: rel.HeldFor.Seconds()})
}

// forceRelease serves DELETE /v1/locks/{key}?force=true[&fence=N][&by=WHO]:
// an operator frees a lock whoever holds it.
func (s *Server) forceRelease(w http.ResponseWriter, r *http.Request, k keyspace.Key, q url.Values) {
	if q.Get("owner") != "" {
		writeError(w, badRequest(lockapi.CodeInvalidRequest, "give owner (to release your own lock) or force=true (to free anyone's), not both"))
		return
	}
	var fence int64
	if f := q.Get("fence"); f != "" {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil || v <= 0 {
			writeError(w, badRequest(lockapi.CodeInvalidRequest, fmt.Sprintf("fence %q must be a positive integer: the fence you saw in the lock's status", f)))
			return
		}
		fence = v
	}
	by := q.Get("by")
	if len(by) > 256 {
		writeError(w, badRequest(lockapi.CodeInvalidRequest, "by is longer than 256 bytes"))
		return
	}
	if by == "" {
		by = "unnamed"
	}
	f, err := s.co.ForceRelease(r.Context(), k, fence, s.byWhom(r.Context(), by))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.audit.ForceReleased()
	writeJSON(w, http.StatusOK, lockapi.Forced{Released: true, Forced: true, Key: k.String(), Fence: f.Fence, Holder: holderOf(f.Holder)})
}

func (s *Server) status(w http.ResponseWriter, r *http.Request, k keyspace.Key) {
	if _, err := query(r); err != nil {
		writeError(w, err)
		return
	}
	st, err := s.co.Status(r.Context(), k)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, statusOf(st, s.procs.of))
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		notAllowed(w, r, "GET")
		return
	}
	q, err := query(r, "prefix")
	if err != nil {
		writeError(w, err)
		return
	}
	locks, truncated, err := s.co.List(r.Context(), q.Get("prefix"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := lockapi.List{Locks: make([]lockapi.Status, 0, len(locks)), Truncated: truncated}
	for _, l := range locks {
		out.Locks = append(out.Locks, statusOf(l, nil))
	}
	writeJSON(w, http.StatusOK, out)
}

// body decodes an acquire or extend body, bounded by MaxBodyBytes, and
// refuses query parameters.
func (s *Server) body(w http.ResponseWriter, r *http.Request) (acquireBody, error) {
	if _, err := query(r); err != nil {
		return acquireBody{}, err
	}
	// The server has no read timeout (hold streams stay open for hours), so
	// the body gets a deadline of its own: a Content-Length larger than
	// the body, or a chunked body without its end, must not hang.
	// Every connection the server accepts (unix or TCP) supports deadlines.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	b, err := decodeBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		// The rest of the body is not worth waiting for: answer and close,
		// rather than let the server read on to reuse the connection.
		w.Header().Set("Connection", "close")
		return b, err
	}
	_ = rc.SetReadDeadline(time.Time{})
	return b, nil
}

// fail answers an error from the coordinator, logging those worth a look.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		s.log.Debug("caller hung up", "method", r.Method, "path", r.URL.Path, "err", err)
	} else if errors.Is(err, coordinator.ErrUnavailable) {
		s.log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	} else if errors.Is(err, coordinator.ErrForbidden) {
		s.auditDenied(r.Context(), err)
	}
	writeError(w, err)
}

// query parses the query string and refuses parameters not in allowed.
func query(r *http.Request, allowed ...string) (url.Values, error) {
	if r.URL.RawQuery == "" {
		return nil, nil // most requests: no map to make
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest(lockapi.CodeInvalidRequest, "malformed query string: "+err.Error())
	}
	for name, vals := range q {
		ok := false
		for _, a := range allowed {
			ok = ok || name == a
		}
		if !ok {
			msg := fmt.Sprintf("unknown query parameter %q", name)
			if len(allowed) > 0 {
				msg += "; allowed: " + strings.Join(allowed, ", ")
			}
			return nil, badRequest(lockapi.CodeInvalidRequest, msg)
		}
		if len(vals) > 1 {
			return nil, badRequest(lockapi.CodeInvalidRequest, fmt.Sprintf("query parameter %q given %d times", name, len(vals)))
		}
	}
	return q, nil
}
