package dapr

import (
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/policy"
)

// Dapr's error codes that the lock API answers with: the errorCode of an
// HTTP error body. They are daprd's own (its messages/errorcodes package).
const (
	CodeMalformedRequest  = "ERR_MALFORMED_REQUEST"
	CodeBodyRead          = "ERR_BODY_READ"
	CodeLockStoreNotFound = "ERR_LOCK_STORE_NOT_FOUND"
	CodeTryLock           = "ERR_TRY_LOCK"
	CodeUnlock            = "ERR_UNLOCK"
	CodeAPIUnimplemented  = "ERR_API_UNIMPLEMENTED"
	CodeHealthNotReady    = "ERR_HEALTH_NOT_READY"
	CodeOutboundNotReady  = "ERR_OUTBOUND_HEALTH_NOT_READY"
)

// Error is an answer of Dapr's API that is not a success: daprd's error
// code and message, with the HTTP status and gRPC code daprd gives it.
type Error struct {
	Code    string
	Message string
	HTTP    int
	GRPC    codes.Code
}

func (e *Error) Error() string { return e.Message }

// GRPCStatus makes the error a gRPC status (status.FromError).
func (e *Error) GRPCStatus() *status.Status { return status.New(e.GRPC, e.Message) }

// Body is the HTTP error body, as daprd writes it.
type Body struct {
	ErrorCode string `json:"errorCode"`
	Message   string `json:"message"`
}

// Body returns e's HTTP error body.
func (e *Error) Body() Body { return Body{ErrorCode: e.Code, Message: e.Message} }

func malformed(format string, args ...any) *Error {
	return &Error{Code: CodeMalformedRequest, Message: fmt.Sprintf(format, args...), HTTP: http.StatusBadRequest, GRPC: codes.InvalidArgument}
}

func storeNotFound(name string, known []Store) *Error {
	names := make([]string, len(known))
	for i, s := range known {
		names[i] = s.Name
	}
	return &Error{Code: CodeLockStoreNotFound, HTTP: http.StatusBadRequest, GRPC: codes.InvalidArgument,
		Message: fmt.Sprintf("lock store %s not found; this Baton sidecar serves %q (--dapr-store)", name, names)}
}

func unimplemented(what string) *Error {
	return &Error{Code: CodeAPIUnimplemented, HTTP: http.StatusNotImplemented, GRPC: codes.Unimplemented,
		Message: what + " is not served: Baton serves only Dapr's distributed lock API (TryLockAlpha1, UnlockAlpha1), with health and metadata"}
}

// failed maps a coordinator error of a try-lock (op CodeTryLock) or an
// unlock (CodeUnlock) that is not an answer of Dapr's API (those are
// success false and the unlock statuses): the one place where they become
// Dapr errors. A field out of range is the caller's (400); a lock policy's
// refusal is 403; etcd unreachable is daprd's error for a component that
// failed (500, gRPC Internal), its message saying so.
func failed(op string, err error) *Error {
	var (
		inv       *coordinator.InvalidError
		forbidden *policy.Forbidden
	)
	verb := "failed to try acquiring lock"
	if op == CodeUnlock {
		verb = "failed to release lock"
	}
	switch {
	case errors.As(err, &inv):
		return malformed("%s: %s", fieldName(inv.Field), inv.Msg)
	case errors.As(err, &forbidden):
		return &Error{Code: op, HTTP: http.StatusForbidden, GRPC: codes.PermissionDenied, Message: verb + ": " + err.Error()}
	case errors.Is(err, coordinator.ErrTooManyWaiters):
		return &Error{Code: op, HTTP: http.StatusTooManyRequests, GRPC: codes.ResourceExhausted, Message: verb + ": " + err.Error()}
	}
	return &Error{Code: op, HTTP: http.StatusInternalServerError, GRPC: codes.Internal, Message: verb + ": " + err.Error()}
}

// fieldName names a coordinator request field as Dapr's API spells it.
func fieldName(field string) string {
	switch field {
	case "owner":
		return "LockOwner"
	case "ttl":
		return "ExpiryInSeconds"
	case "key":
		return "ResourceId"
	}
	return field
}
