package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
)

// Exit codes of `baton run` besides the command's own.
const (
	exitHeld        = 75 // EX_TEMPFAIL: someone else runs it (or the wait ran out)
	exitUnavailable = 69 // EX_UNAVAILABLE: the sidecar cannot be reached
	exitNoEtcd      = 74 // the sidecar answers, but cannot reach etcd: nothing was granted
	exitLost        = 70 // the lock was lost while the command ran; it was stopped
	exitForbidden   = 77 // EX_NOPERM: the lock policy does not let this pod take the key
)

// exitError carries an exit code out of a command.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

// holdFailed is the exit of a hold that failed before any event.
func holdFailed(err error, o runOptions) error {
	var ae *lockapi.Error
	if errors.As(err, &ae) {
		return refusal(ae, o)
	}
	return unreachable(err)
}

// refusal is the exit of a hold the sidecar answered with ae.
func refusal(ae *lockapi.Error, o runOptions) error {
	switch ae.Code {
	case lockapi.CodeAlreadyRunning, lockapi.CodeWaitTimeout, lockapi.CodeLockDelayed:
		return exitError{exitHeld, refused(ae, o.wait)}
	case lockapi.CodeUnavailable, lockapi.CodeEtcdPermissionDenied, lockapi.CodeEtcdRewound, lockapi.CodeEtcdNoSpace, lockapi.CodeEtcdCorrupt:
		return exitError{exitNoEtcd, ae.Message + " (" + ae.Code + "; nothing was run)"}
	case lockapi.CodeForbidden:
		return exitError{exitForbidden, ae.Message + " (forbidden)"}
	case lockapi.CodeAlreadyDone:
		return alreadyDone(ae.Message, ae.Run)
	case lockapi.CodeLimitMismatch:
		// Not someone else's turn: a caller that retried would never run.
		return exitError{2, ae.Message + " (limit_mismatch)"}
	case baton.CodeUnexpected:
		return exitError{exitUnavailable, ae.Message + "; is --socket (BATON_SOCKET) a Baton sidecar's?"}
	}
	if ae.Code == lockapi.CodeInvalidLockDelay && !o.shared() && o.lockDelay < o.holdBack() {
		return usageError{fmt.Errorf("--kill-grace %v: %s holds %s it ends other than by letting go back from everyone for the kill grace plus 1s (a lock delay of %v), so that the command's processes are gone before the next holder starts, and the sidecar refuses that: %s; lower --kill-grace, or raise the sidecar's --max-lock-delay",
			o.killGrace, o.command(), o.what(), o.holdBack(), ae.Message)}
	}
	if ae.Status == 400 || strings.HasPrefix(ae.Code, "invalid_") {
		return usageError{errors.New(ae.Message)}
	}
	return exitError{exitUnavailable, ae.Message + " (" + ae.Code + ")"}
}

// refused says why the command did not start: someone else holds the lock
// (already_running), the wait for it ran out (wait_timeout), or a lock
// delay holds it back (lock_delayed).
func refused(ae *lockapi.Error, wait time.Duration) string {
	h := ae.Holder
	what := "already running"
	switch ae.Code {
	case lockapi.CodeWaitTimeout:
		what = fmt.Sprintf("the wait ran out after %v (wait_timeout)", wait)
	case lockapi.CodeLockDelayed:
		s := "held back"
		if !ae.RetryAt.IsZero() {
			s += " until " + ae.RetryAt.UTC().Format(time.RFC3339Nano)
		}
		s += " (lock_delayed): its holder"
		if h != nil && h.Owner != "" {
			s += " " + h.Owner
			if h.Pod != "" {
				s += " (pod " + h.Pod + ")"
			}
		}
		if ae.Fence != 0 {
			s += fmt.Sprintf(" (fence %d)", ae.Fence)
		}
		return s + " lost it without releasing it, and its lock delay keeps it from everyone until then; try again then"
	}
	if h == nil || h.Owner == "" {
		return what + ": " + ae.Message
	}
	s := what + ": held by " + h.Owner
	if h.Pod != "" {
		s += " (pod " + h.Pod + ")"
	}
	if !h.AcquiredAt.IsZero() {
		s += " since " + h.AcquiredAt.UTC().Format(time.RFC3339)
	}
	if !h.ExpiresAt.IsZero() {
		s += ", until " + h.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if ae.Fence != 0 {
		s += fmt.Sprintf(" (fence %d)", ae.Fence)
	}
	return s
}
