package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/keyspace"
)

// The election routes. An election is a line of the coordinator of
// elections, served by the same handlers as a lock's (Server.elections,
// whose co is that coordinator): a campaign is a hold stream that waits
// as long as it takes, the leader is the holder, resigning is a release,
// observing is a watch; proclaim is an election's own.

// electionRoutes routes /v1/elections, /v1/elections:observe and
// /v1/elections/{name}[:verb] (rest is the path after /v1/elections).
func (s *Server) electionRoutes(w http.ResponseWriter, r *http.Request, rest string) {
	es := s.elections
	if es == nil {
		writeError(w, &apiError{status: http.StatusNotFound, code: lockapi.CodeNotFound, msg: "this sidecar serves no elections"})
		return
	}
	switch {
	case rest == "":
		es.list(w, r)
	case rest == ":observe":
		es.watch(w, r, keyspace.Key{})
	case strings.HasPrefix(rest, "/"):
		es.election(w, r, rest[1:])
	default:
		writeError(w, &apiError{status: http.StatusNotFound, code: lockapi.CodeNotFound,
			msg: fmt.Sprintf("no such endpoint %s %s; elections are under /v1/elections/NAME", r.Method, r.URL.Path)})
	}
}

// election routes /v1/elections/{name}[:verb].
func (s *Server) election(w http.ResponseWriter, r *http.Request, rest string) {
	name, verb, hasVerb := strings.Cut(rest, ":")
	k, err := keyspace.ParseKey(name)
	if err != nil {
		writeError(w, err)
		return
	}
	switch {
	case !hasVerb && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		s.status(w, r, k)
	case !hasVerb && r.Method == http.MethodDelete:
		s.release(w, r, k)
	case !hasVerb:
		notAllowed(w, r, "GET, DELETE")
	case verb == "campaign" && r.Method == http.MethodPost:
		s.hold(w, r, k)
	case verb == "proclaim" && r.Method == http.MethodPost:
		s.proclaim(w, r, k)
	case verb == "campaign" || verb == "proclaim":
		notAllowed(w, r, "POST")
	case verb == "observe":
		s.watch(w, r, k)
	default:
		writeError(w, &apiError{status: http.StatusNotFound, code: lockapi.CodeNotFound,
			msg: fmt.Sprintf("unknown method %q after the election's name; the custom methods are :campaign, :proclaim and :observe", verb)})
	}
}

// proclaim serves POST /v1/elections/{name}:proclaim {"owner","value"}: the
// leader announces a new value.
func (s *Server) proclaim(w http.ResponseWriter, r *http.Request, k keyspace.Key) {
	b, err := s.body(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	switch {
	case b.Owner == "":
		writeError(w, badRequest(lockapi.CodeInvalidOwner, "owner is required to proclaim: the leader's owner, as it campaigned"))
		return
	case !b.valueGiven:
		writeError(w, badRequest(lockapi.CodeInvalidValue, `proclaim needs value: what the leader announces from now on ("" to announce nothing)`))
		return
	case b.TTL != 0 || b.waitGiven || b.MaxHold != 0 || b.claimed || b.Once != nil || b.LockDelay != 0:
		writeError(w, badRequest(lockapi.CodeInvalidRequest, "proclaim takes owner and value only"))
		return
	}
	g, err := s.co.Proclaim(r.Context(), k, b.Owner, b.Value)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, grantOf(g))
}

// kind names what s serves a line of, for messages: "lock", or "the
// leadership of election".
func (s *Server) kind() string {
	if s.electionsServed() {
		return "the leadership of election"
	}
	return "lock"
}

// electionsServed says whether s serves elections.
func (s *Server) electionsServed() bool { return s.co.Layout().Space() == keyspace.Elections }
