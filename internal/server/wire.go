package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
)

// acquireBody is the body of POST /v1/locks/{key}, {key}:hold and
// {key}:extend, decoded straight into the engine's request, which checks
// it (Coordinator.Acquire): the key comes from the path, Hold and
// Position from the route.
type acquireBody struct {
	coordinator.AcquireRequest
	// claimed says that a mode, limit or weight was given (extend takes
	// none).
	claimed bool
	// waitGiven says that wait was given: a campaign without it waits
	// as long as it takes.
	waitGiven bool
	// valueGiven says that value was given ("" included): a proclaim
	// needs it, an extend takes none.
	valueGiven bool
}

// decodeBody reads one JSON object strictly: unknown fields (names match
// exactly), repeated fields, wrong types, trailing data and bad durations
// are errors that name the field. An empty body gives the zero
// acquireBody. It reads the object in one pass: this is on the path of
// every try, and a burst of refused tries is what a lock service must
// answer cheaply.
func decodeBody(r io.Reader) (acquireBody, error) {
	t, err := readObject(r, `{"owner":"exec-1","ttl":"5m","wait":"30s"}`)
	if err != nil || t == nil {
		return acquireBody{}, err
	}
	var raw [12]json.RawMessage // owner, ttl, wait, max_hold, mode, limit, weight, once, if_done, if_failed, lock_delay, value
	err = members(t, func(name string, value []byte) error {
		i := bodyField(name)
		switch {
		case i < 0:
			return badRequest(lockapi.CodeInvalidRequest, fmt.Sprintf("unknown field %q; the fields are owner, ttl, wait, mode, limit, weight, lock_delay, once, if_done, if_failed, (on :hold and :campaign) max_hold and (on an election) value", name))
		case raw[i] != nil:
			return badRequest(lockapi.CodeInvalidRequest, fmt.Sprintf("the field %q appears more than once: give it once", name))
		}
		raw[i] = value
		return nil
	})
	if err != nil {
		return acquireBody{}, err
	}
	var b acquireBody
	if len(raw[0]) > 0 && string(raw[0]) != "null" {
		if err := json.Unmarshal(raw[0], &b.Owner); err != nil {
			return acquireBody{}, badRequest(lockapi.CodeInvalidOwner, fmt.Sprintf("owner must be a string, not %s", clip(raw[0])))
		}
	}
	if b.TTL, err = parseDuration("ttl", raw[1]); err != nil {
		return acquireBody{}, err
	}
	if b.TTL == 0 && len(raw[1]) > 0 && string(raw[1]) != "null" {
		// Zero is how the API says "not given"; a caller who wrote it meant
		// something else than the default.
		return acquireBody{}, badRequest(lockapi.CodeInvalidTTL, "ttl 0 holds nothing: give at least 1s, or leave ttl out for the sidecar's default")
	}
	b.waitGiven = given(raw[2])
	if string(raw[2]) == `"`+lockapi.WaitForever+`"` {
		b.Wait = coordinator.WaitForever
	} else if b.Wait, err = parseDuration("wait", raw[2]); err != nil {
		return acquireBody{}, err
	}
	if b.MaxHold, err = parseDuration("max_hold", raw[3]); err != nil {
		return acquireBody{}, err
	}
	if b.MaxHold == 0 && len(raw[3]) > 0 && string(raw[3]) != "null" {
		return acquireBody{}, badRequest(lockapi.CodeInvalidMaxHold, "max_hold 0 caps nothing: give at least 1s, or leave max_hold out to hold for as long as the stream stays open")
	}
	if err := decodeClaim(&b, raw[4], raw[5], raw[6]); err != nil {
		return acquireBody{}, err
	}
	if err := decodeOnce(&b, raw[7], raw[8], raw[9]); err != nil {
		return acquireBody{}, err
	}
	if b.LockDelay, err = parseDuration("lock_delay", raw[10]); err != nil {
		return acquireBody{}, err
	}
	b.valueGiven = given(raw[11])
	if b.valueGiven && json.Unmarshal(raw[11], &b.Value) != nil {
		return acquireBody{}, badRequest(lockapi.CodeInvalidValue, fmt.Sprintf("value must be a string, not %s", clip(raw[11])))
	}
	return b, nil
}

// readObject reads a body that must be one JSON object (example shows
// one in the error), or nothing (nil).
func readObject(r io.Reader, example string) ([]byte, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, err
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, &apiError{status: http.StatusRequestTimeout, code: lockapi.CodeBodyTimeout,
				msg: "the request body did not arrive in time: is Content-Length larger than the body?"}
		}
		return nil, badRequest(lockapi.CodeInvalidRequest, "the body could not be read: "+err.Error())
	}
	t := bytes.TrimSpace(data)
	if len(t) == 0 {
		return nil, nil
	}
	if t[0] != '{' {
		return nil, badRequest(lockapi.CodeInvalidJSON, "the body must be a JSON object like "+example)
	}
	if !json.Valid(t) {
		var v any
		err := json.Unmarshal(t, &v) // only for its message
		if err == nil {
			err = errors.New("invalid JSON")
		}
		return nil, badRequest(lockapi.CodeInvalidJSON, "the body is not valid JSON: "+err.Error())
	}
	return t, nil
}

// decodeClaim reads mode, limit and weight. A limit or weight of 0 that
// the caller wrote is refused: 0 is how the API says "not given".
func decodeClaim(b *acquireBody, mode, limit, weight json.RawMessage) error {
	if given(mode) {
		var m string
		if err := json.Unmarshal(mode, &m); err != nil {
			return badRequest(lockapi.CodeInvalidMode, fmt.Sprintf("mode must be a string, read or write, not %s", clip(mode)))
		}
		switch m {
		case "read":
			b.Claim.Mode = keyspace.Read
		case "write":
		default:
			return badRequest(lockapi.CodeInvalidMode, fmt.Sprintf("mode %q is not a mode; use read (shared with other readers) or write (exclusive, the default)", m))
		}
	}
	limitHint := "" // made only for a request that gives a limit
	if given(limit) {
		limitHint = fmt.Sprintf("a semaphore has 1 to %d units; leave limit out for a lock", keyspace.MaxLimit)
	}
	var err error
	if b.Claim.Limit, err = count("limit", limit, lockapi.CodeInvalidLimit, limitHint); err != nil {
		return err
	}
	if b.Claim.Weight, err = count("weight", weight, lockapi.CodeInvalidWeight, "a weight is 1 to the limit; leave it out to take 1 unit"); err != nil {
		return err
	}
	b.claimed = given(mode) || given(limit) || given(weight)
	return nil
}

// count reads a positive JSON integer; absent and null mean 0.
func count(field string, raw json.RawMessage, code, hint string) (int, error) {
	if !given(raw) {
		return 0, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		// A string, a bool, an object: the field's type is wrong, not its
		// value, whatever the text says ("2").
		return 0, badRequest(code, fmt.Sprintf("%s must be a number, not %s: %s", field, clip(raw), hint))
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, badRequest(code, fmt.Sprintf("%s %s is not a whole number: %s", field, clip(raw), hint))
	}
	if n < 1 || n > math.MaxInt32 {
		return 0, badRequest(code, fmt.Sprintf("%s %s is not allowed: %s", field, clip(raw), hint))
	}
	return int(n), nil
}

func given(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// bodyField returns the index of a field of an acquire or extend body in
// decodeBody's raw values, or -1.
func bodyField(name string) int {
	switch name {
	case "owner":
		return 0
	case "ttl":
		return 1
	case "wait":
		return 2
	case "max_hold":
		return 3
	case "mode":
		return 4
	case "limit":
		return 5
	case "weight":
		return 6
	case "once":
		return 7
	case "if_done":
		return 8
	case "if_failed":
		return 9
	case "lock_delay":
		return 10
	case "value":
		return 11
	}
	return -1
}

// parseDuration reads a JSON duration: a Go duration string ("30s", "5m")
// or a number of seconds (30, 0.5); absent and null mean 0. Negative values
// are refused here, so that nothing negative reaches the coordinator.
func parseDuration(field string, raw json.RawMessage) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	bad := func(format string, args ...any) error {
		return badRequest(invalidCode(field), field+": "+fmt.Sprintf(format, args...))
	}
	var d time.Duration
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, bad("%s is not a string", clip(raw))
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return 0, bad("%q is not a duration; write it like \"30s\", \"5m\" or \"1h30m\"", s)
		}
		d = v
	default:
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil {
			return 0, bad("%s is not a duration; use a string like \"30s\" or a number of seconds", clip(raw))
		}
		if math.IsNaN(f) || math.Abs(f) > float64(math.MaxInt64/int64(time.Second)) {
			return 0, bad("%s seconds is out of range", clip(raw))
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d < 0 {
		return 0, bad("%v is negative", d)
	}
	return d, nil
}

func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// holderOf is h as answers show it.
func holderOf(h keyspace.Holder) *lockapi.Holder {
	return &lockapi.Holder{
		Owner: h.Owner, Pod: h.Pod, Namespace: h.Namespace, Node: h.Node, Cluster: h.Cluster,
		AcquiredAt: h.AcquiredAt.UTC(), ExpiresAt: h.ExpiresAt.UTC(), Foreign: h.Foreign, Value: h.Value,
		Mode: string(h.Mode), Weight: h.Units(),
	}
}

func grantOf(g coordinator.Grant) lockapi.Grant {
	return lockapi.Grant{Granted: true, Key: g.Key.String(), Owner: g.Owner, Fence: g.Fence, AcquiredAt: g.AcquiredAt.UTC(), ExpiresAt: g.ExpiresAt.UTC(),
		Mode: string(g.Claim.Mode), Limit: g.Claim.Limit, Weight: g.Claim.Units(), Value: g.Value}
}

// statusOf is s as answers show it; proc, when not nil, shows its local
// callers' processes (a status read, not a list or a watch).
func statusOf(s coordinator.Status, proc func(*coordinator.Caller) *lockapi.Process) lockapi.Status {
	if proc == nil {
		proc = func(*coordinator.Caller) *lockapi.Process { return nil }
	}
	st := lockapi.Status{Key: s.Key.String(), Waiters: s.Waiters, Waiting: waitingOf(s.Waiting, proc)}
	for _, q := range s.Queued {
		st.QueuedHere = append(st.QueuedHere, lockapi.Queued{Owner: q.Owner, Since: q.Since.UTC(), Process: proc(&q)})
	}
	if !s.Held {
		return st
	}
	st.Held, st.Holder, st.Fence, st.ExpiresAt = true, holderOf(s.Holder), s.Fence, s.Holder.ExpiresAt.UTC()
	st.Limit, st.HeldUnits = s.Limit, s.HeldUnits
	if len(s.Holders) > 0 {
		st.Holder.Process = proc(s.Holders[0].Caller)
	}
	if len(s.Holders) > 1 || s.Limit > 0 {
		st.Holders = make([]lockapi.Holding, len(s.Holders))
		for i, h := range s.Holders {
			st.Holders[i] = lockapi.Holding{Holder: *holderOf(h.Holder), Fence: h.Fence}
			st.Holders[i].Process = proc(h.Caller)
		}
	}
	return st
}

// waitingOf is the contenders waiting, as answers show them.
func waitingOf(ws []coordinator.Waiting, proc func(*coordinator.Caller) *lockapi.Process) []lockapi.Waiter {
	if len(ws) == 0 {
		return nil
	}
	out := make([]lockapi.Waiter, len(ws))
	for i, w := range ws {
		h := w.Holder
		out[i] = lockapi.Waiter{Owner: h.Owner, Pod: h.Pod, Namespace: h.Namespace, Node: h.Node, Cluster: h.Cluster,
			Since: h.AcquiredAt.UTC(), Queued: max(h.Queued, 0), Foreign: h.Foreign, Mode: string(h.Mode), Weight: h.Units(), Process: proc(w.Caller)}
	}
	return out
}

// writeJSON answers v as one JSON line. It marshals first and writes
// once, so that net/http sends the answer with its Content-Length.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only a bug gets here: every answer is made of plain fields.
		status, b = http.StatusInternalServerError, []byte(`{"code":"internal","message":"the answer could not be encoded"}`)
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b) // the caller may be gone; nothing to do about it
}

// deliverJSON is writeJSON sent at once, with the error of sending it: on
// a unix socket, writing to a caller that hung up fails.
func deliverJSON(w http.ResponseWriter, status int, v any) error {
	writeJSON(w, status, v)
	return http.NewResponseController(w).Flush()
}
