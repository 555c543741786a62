package server

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
)

// decodeOnce reads once, if_done and if_failed.
func decodeOnce(b *acquireBody, once, ifDone, ifFailed json.RawMessage) error {
	var on bool
	if given(once) {
		if err := json.Unmarshal(once, &on); err != nil {
			return badRequest(lockapi.CodeInvalidRequest, fmt.Sprintf("once must be true or false, not %s", clip(once)))
		}
	}
	var o coordinator.Once
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		to   *string
	}{{"if_done", ifDone, &o.IfDone}, {"if_failed", ifFailed, &o.IfFailed}} {
		if !given(f.raw) {
			continue
		}
		if !on {
			return badRequest(lockapi.CodeInvalidRequest, f.name+" goes with once: true")
		}
		if err := json.Unmarshal(f.raw, f.to); err != nil {
			return badRequest(lockapi.CodeInvalidRequest, fmt.Sprintf("%s must be a string, not %s", f.name, clip(f.raw)))
		}
	}
	if on {
		b.Once = &o
	}
	return nil
}

// done routes /v1/locks/{key}:done: POST records a run-once holder's
// outcome as it lets the lock go; GET reads the last run's record.
func (s *Server) done(w http.ResponseWriter, r *http.Request, k keyspace.Key) {
	switch r.Method {
	case http.MethodPost:
		s.finish(w, r, k)
	case http.MethodGet, http.MethodHead:
		if _, err := query(r); err != nil {
			writeError(w, err)
			return
		}
		run, found, err := s.co.LastRun(r.Context(), k)
		switch {
		case err != nil:
			s.fail(w, r, err)
		case !found:
			writeError(w, &apiError{status: http.StatusNotFound, code: lockapi.CodeNotFound,
				msg: fmt.Sprintf("%q has no finished run within the sidecar's once retention", k.String())})
		default:
			writeJSON(w, http.StatusOK, runOf(k, run))
		}
	default:
		notAllowed(w, r, "GET, POST")
	}
}

func (s *Server) finish(w http.ResponseWriter, r *http.Request, k keyspace.Key) {
	d, err := s.doneBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	run, err := s.co.Finish(r.Context(), k, d.Owner, d.OK, d.Result)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, runOf(k, run))
}

// doneBody decodes the body of :done strictly: owner and ok required.
func (s *Server) doneBody(w http.ResponseWriter, r *http.Request) (lockapi.Done, error) {
	if _, err := query(r); err != nil {
		return lockapi.Done{}, err
	}
	t, err := readObject(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), `{"owner":"exec-1","ok":true,"result":"applied"}`)
	if err != nil {
		return lockapi.Done{}, err
	}
	var raw [3]json.RawMessage // owner, ok, result
	if t != nil {
		err = members(t, func(name string, value []byte) error {
			i := map[string]int{"owner": 0, "ok": 1, "result": 2}[name]
			switch {
			case name != "owner" && name != "ok" && name != "result":
				return badRequest(lockapi.CodeInvalidRequest, fmt.Sprintf("unknown field %q; the fields are owner, ok and result", name))
			case raw[i] != nil:
				return badRequest(lockapi.CodeInvalidRequest, fmt.Sprintf("the field %q appears more than once: give it once", name))
			}
			raw[i] = value
			return nil
		})
		if err != nil {
			return lockapi.Done{}, err
		}
	}
	var d lockapi.Done
	if !given(raw[0]) || json.Unmarshal(raw[0], &d.Owner) != nil || d.Owner == "" {
		return d, badRequest(lockapi.CodeInvalidOwner, "owner is required: the execution id that holds the lock")
	}
	if !given(raw[1]) || json.Unmarshal(raw[1], &d.OK) != nil {
		return d, badRequest(lockapi.CodeInvalidRequest, `ok is required: true when the run succeeded (it is not run again), false when it failed`)
	}
	if given(raw[2]) && json.Unmarshal(raw[2], &d.Result) != nil {
		return d, badRequest(lockapi.CodeInvalidRequest, fmt.Sprintf("result must be a string, not %s", clip(raw[2])))
	}
	return d, nil
}

// runOf is a run-once record as answers show it.
func runOf(k keyspace.Key, r keyspace.Run) lockapi.Run {
	return lockapi.Run{Key: k.String(), Status: r.Status, Owner: r.Owner, Pod: r.Pod, Namespace: r.Namespace, Node: r.Node, Cluster: r.Cluster, Fence: r.Fence,
		StartedAt: r.StartedAt.UTC(), FinishedAt: r.FinishedAt.UTC(), Result: r.Result, ExpiresAt: r.ExpiresAt.UTC()}
}
