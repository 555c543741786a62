// Package server is Baton's socket API: HTTP/1.1 and JSON over a unix
// socket. Each handler decodes and validates, calls the coordinator, and
// encodes; writeError is the one place where errors become status codes.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/config"
	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
)

// Config configures the HTTP side of the socket API.
type Config struct {
	// MaxBodyBytes bounds a request body; larger bodies get 413. Default 64 KiB.
	MaxBodyBytes int64
	// ReadHeaderTimeout bounds reading a request's headers. Default 5s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections. Default 2m.
	IdleTimeout time.Duration
	// BodyTimeout bounds reading a request's body once its headers are in;
	// past it the caller gets 408. Default 5s.
	BodyTimeout time.Duration
	// HeartbeatInterval is how often a hold stream says it is alive, so that
	// a reader that died is noticed. Default 5s.
	HeartbeatInterval time.Duration
}

// Default returns the documented defaults.
func Default() Config {
	return Config{MaxBodyBytes: 64 << 10, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute, BodyTimeout: 5 * time.Second, HeartbeatInterval: 5 * time.Second}
}

// Validate checks the fields.
func (c Config) Validate() error {
	switch {
	case c.MaxBodyBytes < 1024:
		return config.Invalid("server.MaxBodyBytes", "max body bytes %d: must be at least 1024", c.MaxBodyBytes)
	case c.ReadHeaderTimeout <= 0:
		return config.Invalid("server.ReadHeaderTimeout", "read header timeout %v: must be positive", c.ReadHeaderTimeout)
	case c.IdleTimeout <= 0:
		return config.Invalid("server.IdleTimeout", "idle timeout %v: must be positive", c.IdleTimeout)
	case c.BodyTimeout <= 0:
		return config.Invalid("server.BodyTimeout", "body timeout %v: must be positive", c.BodyTimeout)
	case c.HeartbeatInterval <= 0:
		return config.Invalid("server.HeartbeatInterval", "heartbeat interval %v: must be positive", c.HeartbeatInterval)
	}
	return nil
}

// Server serves the socket API.
type Server struct {
	cfg Config
	// co serves the lines: the scope's locks, or, in the server of the
	// elections' routes (elections), its elections.
	co        *coordinator.Coordinator
	elections *Server // the same server on the coordinator of elections (WithElections); nil without
	log       *slog.Logger
	caller    Caller // for the audit log (WithAudit)
	audit     Audit
	drain     *drain // the hold streams a shutdown waits for (Drain)
	procs     *procs // the local callers' processes, for a status
}

// New returns a Server for locks.
func New(cfg Config, locks *coordinator.Coordinator, log *slog.Logger, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, co: locks, log: log, audit: nopAudit{}, drain: newDrain(), procs: newProcs("/proc")}
	for _, o := range opts {
		o(s)
	}
	if s.elections != nil {
		es := *s // the same options, drain and process reader
		es.co, es.elections = s.elections.co, nil
		es.log = s.log.With("space", "elections")
		s.elections = &es
	}
	return s, nil
}

// WithElections serves the scope's elections, from co (a coordinator of
// keyspace.Elections), under /v1/elections; a nil co serves none.
func WithElections(co *coordinator.Coordinator) Option {
	return func(s *Server) {
		if co != nil {
			s.elections = &Server{co: co}
		}
	}
}

// Handler returns the whole socket API. It routes by hand rather than
// with ServeMux, whose path cleaning would silently turn the invalid key
// "a/../b" into "b" and whose 404 and 405 answers are not JSON.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rest, ok := strings.CutPrefix(r.URL.Path, "/v1/locks/"); ok {
			s.lock(w, r, rest)
			return
		}
		if rest, ok := strings.CutPrefix(r.URL.Path, "/v1/elections"); ok {
			s.electionRoutes(w, r, rest)
			return
		}
		switch r.URL.Path {
		case "/v1/locks":
			s.list(w, r)
			return
		case "/v1/locks:watch":
			s.watch(w, r, keyspace.Key{})
			return
		case "/v1/openapi.json":
			serveOpenAPI(w, r)
			return
		}
		s.health(w, r)
	})
}

// Starting returns h behind a gate for a sidecar that is still taking over
// the locks of the process before it (see Coordinator.Adopt): until open is
// closed, a request waits for it, up to wait, then answers 503 unavailable
// saying why. Probes (/healthz, /readyz) pass at once.
func (s *Server) Starting(h http.Handler, open <-chan struct{}, wait time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			h.ServeHTTP(w, r)
			return
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-open:
			h.ServeHTTP(w, r)
		case <-r.Context().Done():
		case <-t.C:
			why := "it is taking over the locks of the process before it"
			if err := s.co.Ready(); err != nil {
				why += ": " + err.Error()
			}
			writeError(w, fmt.Errorf("%w: the sidecar is starting; %s", coordinator.ErrUnavailable, why))
		}
	})
}

// serveOpenAPI answers the OpenAPI document of the socket API.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		notAllowed(w, r, "GET")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(lockapi.OpenAPI())
}

// HealthHandler returns only /healthz and /readyz, for a TCP probe port.
func (s *Server) HealthHandler() http.Handler { return http.HandlerFunc(s.health) }

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path != "/healthz" && r.URL.Path != "/readyz":
		writeError(w, &apiError{status: http.StatusNotFound, code: lockapi.CodeNotFound,
			msg: fmt.Sprintf("no such endpoint %s %s; the API is under /v1/locks and /v1/elections", r.Method, r.URL.Path)})
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		notAllowed(w, r, "GET")
	case r.URL.Path == "/healthz":
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	default:
		if err := s.co.Ready(); err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	}
}

// HTTPServer returns an http.Server for h with the configured limits. It
// sets no write timeout: a blocking acquire is bounded by the coordinator's
// maximum wait instead.
func (s *Server) HTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ConnContext:       withPeer,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// Serve serves h on l until ctx ends, then shuts down gracefully within
// grace and closes l.
func Serve(ctx context.Context, srv *http.Server, l net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
