package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/engine"
)

// FuzzHandler feeds raw HTTP requests to the socket API backed by a real
// coordinator and etcd: no panic, no 5xx but 503 (etcd), every error a JSON
// body with a code, every answer within a bound.
func FuzzHandler(f *testing.F) {
	for _, s := range []string{
		"POST /v1/locks/a HTTP/1.1\r\nHost: b\r\nContent-Length: 16\r\n\r\n{\"owner\":\"fz1\"}",
		"POST /v1/locks/a:hold HTTP/1.1\r\nHost: b\r\nContent-Length: 2\r\n\r\n{}",
		"POST /v1/locks/a:extend HTTP/1.1\r\nHost: b\r\nContent-Length: 28\r\n\r\n{\"owner\":\"fz1\",\"ttl\":\"1m\"}",
		"DELETE /v1/locks/a?owner=fz1 HTTP/1.1\r\nHost: b\r\n\r\n",
		"DELETE /v1/locks/a?force=true&fence=1 HTTP/1.1\r\nHost: b\r\n\r\n",
		"GET /v1/locks/a/b/c HTTP/1.1\r\nHost: b\r\n\r\n",
		"GET /v1/locks?prefix=a HTTP/1.1\r\nHost: b\r\n\r\n",
		"GET /readyz HTTP/1.1\r\nHost: b\r\n\r\n",
		"POST /v1/locks/%2e%2e HTTP/1.1\r\nHost: b\r\nContent-Length: 4\r\n\r\nnull",
		"POST /v1/locks/x HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"ttl\r\n0\r\n\r\n",
		"POST /v1/locks/x HTTP/1.1\r\nHost: b\r\nContent-Length: 30\r\n\r\n{\"wait\":1e999,\"ttl\":\"9e9h\"}",
		"PATCH /v1/locks/x:extend:hold HTTP/1.1\r\nHost: b\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	a := newAPI(f, "fuzz", func(c *engine.Config, _ *Config) { c.Coordinator.MaxWait = 100 * time.Millisecond })
	h := a.srv.Handler()
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // not HTTP: the server's parser answers 400 before any handler
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req.WithContext(ctx))
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("answer took %v", d)
		}
		code := rec.Code
		if code >= 500 && code != http.StatusServiceUnavailable {
			t.Fatalf("%q: status %d: %s", raw, code, rec.Body.String())
		}
		if code < 400 || code == 499 || req.Method == http.MethodHead {
			return
		}
		var body struct{ Code, Message string }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Code == "" || body.Message == "" {
			t.Fatalf("%q: status %d without a JSON error: %q", raw, code, rec.Body.String())
		}
	})
}
