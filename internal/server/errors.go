package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/policy"
)

// apiError is an error with its status and code, made by the handlers for
// request problems they find themselves.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(code, msg string) error {
	return &apiError{status: http.StatusBadRequest, code: code, msg: msg}
}

// writeError is the one place where errors become HTTP status codes.
func writeError(w http.ResponseWriter, err error) {
	status, body := classify(err)
	writeJSON(w, status, body)
}

func classify(err error) (int, lockapi.Error) {
	status, body := classified(err)
	if body.Message == "" {
		body.Message = err.Error()
	}
	return status, body
}

// classified maps err to its status and code; it sets the message only
// where err.Error() is not the one to give.
func classified(err error) (int, lockapi.Error) {
	// errors.AsType, not errors.As: a target of As escapes, and a
	// refusal, the common answer, would pay an allocation for each.
	var body lockapi.Error
	if status, body, ok := refusal(err); ok {
		return status, body
	}
	if ae, ok := errors.AsType[*apiError](err); ok {
		body.Code, body.Message = ae.code, ae.msg
		return ae.status, body
	}
	if tooBig, ok := errors.AsType[*http.MaxBytesError](err); ok {
		body.Code = lockapi.CodeBodyTooLarge
		body.Message = fmt.Sprintf("the request body is larger than the sidecar's limit of %d bytes; a lock request's body is a few fields", tooBig.Limit)
		return http.StatusRequestEntityTooLarge, body
	}
	if errors.Is(err, coordinator.ErrFenceMismatch) {
		body.Code = lockapi.CodeFenceMismatch
		return http.StatusConflict, body
	}
	if notOwner, ok := errors.AsType[*coordinator.NotOwnerError](err); ok {
		body.Code, body.Key, body.Holder = lockapi.CodeNotOwner, notOwner.Key.String(), holderOf(notOwner.Holder)
		return http.StatusForbidden, body
	}
	if forbidden, ok := errors.AsType[*policy.Forbidden](err); ok {
		body.Code, body.Key = lockapi.CodeForbidden, forbidden.Key
		return http.StatusForbidden, body
	}
	if errors.Is(err, coordinator.ErrNotOwner) {
		body.Code = lockapi.CodeNotOwner
		return http.StatusForbidden, body
	}
	if lost, ok := errors.AsType[*coordinator.LostError](err); ok {
		body.Code, body.Key, body.Fence, body.Reason = lockapi.CodeLockLost, lost.Key.String(), lost.Fence, string(lost.Reason)
		body.EndedAt = lost.At.UTC()
		return http.StatusGone, body
	}
	if errors.Is(err, coordinator.ErrNotHeld) {
		body.Code = lockapi.CodeNotHeld
		return http.StatusNotFound, body
	}
	if inv, ok := errors.AsType[*coordinator.InvalidError](err); ok {
		body.Code = invalidCode(inv.Field)
		return http.StatusBadRequest, body
	}
	status, code := unavailableCode(err)
	body.Code = code
	return status, body
}

// unavailableCode maps the errors that are neither a refusal nor about
// the caller's request: the sidecar's limits and etcd's state.
func unavailableCode(err error) (int, string) {
	switch {
	case errors.Is(err, keyspace.ErrInvalidKey):
		return http.StatusBadRequest, lockapi.CodeInvalidKey
	case errors.Is(err, coordinator.ErrTooManyWaiters):
		return http.StatusTooManyRequests, lockapi.CodeTooManyWaiters
	case errors.Is(err, coordinator.ErrPermissionDenied):
		return http.StatusServiceUnavailable, lockapi.CodeEtcdPermissionDenied
	case errors.Is(err, coordinator.ErrNoSpace):
		return http.StatusServiceUnavailable, lockapi.CodeEtcdNoSpace
	case errors.Is(err, coordinator.ErrCorrupt):
		return http.StatusServiceUnavailable, lockapi.CodeEtcdCorrupt
	case errors.Is(err, coordinator.ErrRewound):
		return http.StatusServiceUnavailable, lockapi.CodeEtcdRewound
	case errors.Is(err, coordinator.ErrUnavailable):
		return http.StatusServiceUnavailable, lockapi.CodeUnavailable
	case errors.Is(err, context.Canceled):
		// The caller hung up; nobody reads this answer.
		return 499, lockapi.CodeUnavailable
	}
	return http.StatusInternalServerError, lockapi.CodeInternal
}

// refusal maps the errors of an acquire refused for want of the lock (409
// already_running, wait_timeout, fence_mismatch, limit_mismatch,
// already_done); ok is false for the others.
func refusal(err error) (status int, body lockapi.Error, ok bool) {
	no := false
	if held, ok := errors.AsType[*coordinator.HeldError](err); ok {
		body.Granted, body.Key, body.Fence = &no, held.Key.String(), held.Fence
		body.Message = held.Error()
		if held.Fence != 0 {
			body.Holder = holderOf(held.Holder)
		}
		for _, h := range held.Holders {
			body.Holders = append(body.Holders, lockapi.Holding{Holder: *holderOf(h.Holder), Fence: h.Fence})
		}
		switch {
		case held.Mismatch != 0:
			body.Granted, body.Code = nil, lockapi.CodeFenceMismatch
		case held.Waited:
			body.Code = lockapi.CodeWaitTimeout
		default:
			body.Code = lockapi.CodeAlreadyRunning
		}
		return http.StatusConflict, body, true
	}
	if delayed, ok := errors.AsType[*coordinator.DelayedError](err); ok {
		body.Message = delayed.Error()
		body.Granted, body.Code, body.Key, body.RetryAt = &no, lockapi.CodeLockDelayed, delayed.Key.String(), delayed.Until.UTC()
		body.Holder, body.Fence = &lockapi.Holder{Owner: delayed.Mark.Owner, Pod: delayed.Mark.Pod}, delayed.Mark.Fence
		return http.StatusConflict, body, true
	}
	if done, ok := errors.AsType[*coordinator.DoneError](err); ok {
		body.Message = done.Error() // it names the key: no "acquire ..." before it
		run := runOf(done.Key, done.Run)
		body.Granted, body.Code, body.Key, body.Run = &no, lockapi.CodeAlreadyDone, done.Key.String(), &run
		return http.StatusConflict, body, true
	}
	if mismatch, ok := errors.AsType[*coordinator.MismatchError](err); ok {
		body.Message = mismatch.Error()
		body.Granted, body.Code, body.Key = &no, lockapi.CodeLimitMismatch, mismatch.Key.String()
		body.Holder, body.Fence, body.Limit = holderOf(mismatch.Holder), mismatch.Fence, mismatch.InForce.Limit
		return http.StatusConflict, body, true
	}
	return 0, body, false
}

// invalidCode is the code of a request field out of range.
func invalidCode(field string) string {
	switch field {
	case "key":
		return lockapi.CodeInvalidKey
	case "owner":
		return lockapi.CodeInvalidOwner
	case "ttl":
		return lockapi.CodeInvalidTTL
	case "wait":
		return lockapi.CodeInvalidWait
	case "max_hold":
		return lockapi.CodeInvalidMaxHold
	case "mode":
		return lockapi.CodeInvalidMode
	case "limit":
		return lockapi.CodeInvalidLimit
	case "weight":
		return lockapi.CodeInvalidWeight
	case "lock_delay":
		return lockapi.CodeInvalidLockDelay
	case "value":
		return lockapi.CodeInvalidValue
	}
	return lockapi.CodeInvalidRequest
}
