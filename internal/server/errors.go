package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockapi"
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
	var (
		body      lockapi.Error
		ae        *apiError
		notOwner  *coordinator.NotOwnerError
		lost      *coordinator.LostError
		inv       *coordinator.InvalidError
		forbidden *policy.Forbidden
		tooBig    *http.MaxBytesError
	)
	if status, body, ok := refusal(err); ok {
		return status, body
	}
	switch {
	case errors.As(err, &ae):
		body.Code, body.Message = ae.code, ae.msg
		return ae.status, body
	case errors.As(err, &tooBig):
		body.Code = lockapi.CodeBodyTooLarge
		body.Message = fmt.Sprintf("the request body is larger than the sidecar's limit of %d bytes; a lock request's body is a few fields", tooBig.Limit)
		return http.StatusRequestEntityTooLarge, body
	case errors.Is(err, coordinator.ErrFenceMismatch):
		body.Code = lockapi.CodeFenceMismatch
		return http.StatusConflict, body
	case errors.As(err, &notOwner):
		body.Code, body.Key, body.Holder = lockapi.CodeNotOwner, notOwner.Key.String(), holderOf(notOwner.Holder)
		return http.StatusForbidden, body
	case errors.As(err, &forbidden):
		body.Code, body.Key = lockapi.CodeForbidden, forbidden.Key
		return http.StatusForbidden, body
	case errors.Is(err, coordinator.ErrNotOwner):
		body.Code = lockapi.CodeNotOwner
		return http.StatusForbidden, body
	case errors.As(err, &lost):
		body.Code, body.Key, body.Fence, body.Reason = lockapi.CodeLockLost, lost.Key.String(), lost.Fence, string(lost.Reason)
		body.EndedAt = lost.At.UTC()
		return http.StatusGone, body
	case errors.Is(err, coordinator.ErrNotHeld):
		body.Code = lockapi.CodeNotHeld
		return http.StatusNotFound, body
	case errors.As(err, &inv):
		body.Code = invalidCode(inv.Field)
		return http.StatusBadRequest, body
	case errors.Is(err, keyspace.ErrInvalidKey):
		body.Code = lockapi.CodeInvalidKey
		return http.StatusBadRequest, body
	case errors.Is(err, coordinator.ErrTooManyWaiters):
		body.Code = lockapi.CodeTooManyWaiters
		return http.StatusTooManyRequests, body
	case errors.Is(err, coordinator.ErrPermissionDenied):
		body.Code = lockapi.CodeEtcdPermissionDenied
		return http.StatusServiceUnavailable, body
	case errors.Is(err, coordinator.ErrNoSpace):
		body.Code = lockapi.CodeEtcdNoSpace
		return http.StatusServiceUnavailable, body
	case errors.Is(err, coordinator.ErrCorrupt):
		body.Code = lockapi.CodeEtcdCorrupt
		return http.StatusServiceUnavailable, body
	case errors.Is(err, coordinator.ErrRewound):
		body.Code = lockapi.CodeEtcdRewound
		return http.StatusServiceUnavailable, body
	case errors.Is(err, coordinator.ErrUnavailable):
		body.Code = lockapi.CodeUnavailable
		return http.StatusServiceUnavailable, body
	case errors.Is(err, context.Canceled):
		// The caller hung up; nobody reads this answer.
		body.Code = lockapi.CodeUnavailable
		return 499, body
	}
	body.Code = lockapi.CodeInternal
	return http.StatusInternalServerError, body
}

// refusal maps the errors of an acquire refused for want of the lock (409
// already_running, wait_timeout, fence_mismatch, limit_mismatch,
// already_done); ok is false for the others.
func refusal(err error) (status int, body lockapi.Error, ok bool) {
	var (
		held     *coordinator.HeldError
		mismatch *coordinator.MismatchError
		done     *coordinator.DoneError
		delayed  *coordinator.DelayedError
	)
	no := false
	switch {
	case errors.As(err, &held):
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
	case errors.As(err, &delayed):
		body.Message = delayed.Error()
		body.Granted, body.Code, body.Key, body.RetryAt = &no, lockapi.CodeLockDelayed, delayed.Key.String(), delayed.Until.UTC()
		body.Holder, body.Fence = &lockapi.Holder{Owner: delayed.Mark.Owner, Pod: delayed.Mark.Pod}, delayed.Mark.Fence
	case errors.As(err, &done):
		body.Message = done.Error() // it names the key: no "acquire ..." before it
		run := runOf(done.Key, done.Run)
		body.Granted, body.Code, body.Key, body.Run = &no, lockapi.CodeAlreadyDone, done.Key.String(), &run
	case errors.As(err, &mismatch):
		body.Message = mismatch.Error()
		body.Granted, body.Code, body.Key = &no, lockapi.CodeLimitMismatch, mismatch.Key.String()
		body.Holder, body.Fence, body.Limit = holderOf(mismatch.Holder), mismatch.Fence, mismatch.InForce.Limit
	default:
		return 0, body, false
	}
	return http.StatusConflict, body, true
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
	}
	return lockapi.CodeInvalidRequest
}
