package dapr

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	runtimev1pb "github.com/dapr/dapr/pkg/proto/runtime/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// maxBody bounds a request body: a lock request is three short fields.
const maxBody = 64 << 10

// The routes of daprd's HTTP API that Baton serves.
const (
	lockRoute     = "/v1.0-alpha1/lock/"
	unlockRoute   = "/v1.0-alpha1/unlock/"
	healthzRoute  = "/v1.0/healthz"
	outboundRoute = "/v1.0/healthz/outbound"
	metadataRoute = "/v1.0/metadata"
)

// decode reads a request body as daprd does: protobuf's JSON mapping, so
// lowerCamel and snake_case field names, numbers as strings, unknown
// fields ignored; an empty body is an empty request.
var decode = protojson.UnmarshalOptions{DiscardUnknown: true}

// Handler returns daprd's HTTP API as far as Baton serves it.
func (a *API) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		switch {
		case strings.HasPrefix(path, lockRoute):
			if store, ok := a.route(w, r, lockRoute); ok {
				a.serveTryLock(w, r, store)
			}
		case strings.HasPrefix(path, unlockRoute):
			if store, ok := a.route(w, r, unlockRoute); ok {
				a.serveUnlock(w, r, store)
			}
		case path == healthzRoute || path == outboundRoute:
			a.serveHealthz(w, r)
		case path == metadataRoute:
			if allowed(w, r, http.MethodGet) {
				b, _ := protojson.Marshal(a.Metadata())
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write(b)
			}
		default:
			writeError(w, unimplemented(r.Method+" "+path))
		}
	})
}

// route checks the method of a lock route and returns its store name.
func (a *API) route(w http.ResponseWriter, r *http.Request, prefix string) (string, bool) {
	store := strings.TrimPrefix(r.URL.Path, prefix)
	if strings.Contains(store, "/") {
		writeError(w, unimplemented(r.Method+" "+r.URL.Path))
		return "", false
	}
	return store, allowed(w, r, http.MethodPost)
}

func allowed(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method || method == http.MethodGet && r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", method)
	writeError(w, &Error{Code: CodeMalformedRequest, HTTP: http.StatusMethodNotAllowed,
		Message: fmt.Sprintf("%s is not allowed on %s; use %s", r.Method, r.URL.Path, method)})
	return false
}

// body decodes the request body into m.
func body(w http.ResponseWriter, r *http.Request, m proto.Message) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &Error{Code: CodeBodyRead, HTTP: http.StatusRequestEntityTooLarge,
				Message: fmt.Sprintf("failed to read request body: it is larger than %d bytes; a lock request is three short fields", maxBody)}
		}
		return &Error{Code: CodeBodyRead, HTTP: http.StatusBadRequest, Message: "failed to read request body: " + err.Error()}
	}
	if len(b) == 0 {
		return nil
	}
	if err := decode.Unmarshal(b, m); err != nil {
		return malformed("failed deserializing HTTP body: %v", err)
	}
	return nil
}

func (a *API) serveTryLock(w http.ResponseWriter, r *http.Request, store string) {
	req := &runtimev1pb.TryLockRequest{}
	if err := body(w, r, req); err != nil {
		writeError(w, err)
		return
	}
	req.StoreName = store // the path's, as daprd
	ok, k, err := a.tryLock(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := writeJSON(w, http.StatusOK, struct {
		Success bool `json:"success"`
	}{ok}); err != nil && ok {
		a.release(k, req.GetLockOwner(), "the grant could not be written to the caller")
	}
}

func (a *API) serveUnlock(w http.ResponseWriter, r *http.Request, store string) {
	req := &runtimev1pb.UnlockRequest{}
	if err := body(w, r, req); err != nil {
		writeError(w, err)
		return
	}
	req.StoreName = store
	res, err := a.Unlock(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	_ = writeJSON(w, http.StatusOK, struct {
		Status int32 `json:"status"`
	}{int32(res.GetStatus())})
}

// serveHealthz answers daprd's health checks: 204 once locks can be
// granted, else daprd's not-ready error naming why.
func (a *API) serveHealthz(w http.ResponseWriter, r *http.Request) {
	if !allowed(w, r, http.MethodGet) {
		return
	}
	if err := a.Ready(); err != nil {
		code, msg := CodeHealthNotReady, "dapr is not ready: "
		if r.URL.Path == outboundRoute {
			code, msg = CodeOutboundNotReady, "dapr outbound is not ready: "
		}
		writeError(w, &Error{Code: code, HTTP: http.StatusInternalServerError, Message: msg + err.Error()})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func writeError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Code: CodeTryLock, HTTP: http.StatusInternalServerError, Message: err.Error()}
	}
	_ = writeJSON(w, e.HTTP, e.Body())
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}

// NewHTTPServer returns an http.Server for h with the limits of Baton's
// socket API.
func NewHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
