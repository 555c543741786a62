package dapr

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// FuzzHTTP feeds raw HTTP requests to Dapr's HTTP API backed by a real
// coordinator and etcd: no panic, no 5xx (etcd is up) but 501 for what is
// not served, every error daprd's JSON body with a code and a message,
// every success a body an SDK reads.
func FuzzHTTP(f *testing.F) {
	req := func(method, path, body string) []byte {
		return fmt.Appendf(nil, "%s %s HTTP/1.1\r\nHost: b\r\nContent-Length: %d\r\n\r\n%s", method, path, len(body), body)
	}
	for _, seed := range [][]byte{
		req("POST", "/v1.0-alpha1/lock/lockstore", `{"resourceId":"r","lockOwner":"fz","expiryInSeconds":5}`),
		req("POST", "/v1.0-alpha1/unlock/lockstore", `{"resourceId":"r","lockOwner":"fz"}`),
		req("POST", "/v1.0-alpha1/lock/lockstore", `{"resource_id":"..","lock_owner":"x","expiry_in_seconds":"1"}`),
		req("POST", "/v1.0-alpha1/lock/nope", `{}`),
		req("POST", "/v1.0-alpha1/lock/", `null`),
		req("POST", "/v1.0-alpha1/lock/lockstore", `{"resourceId":"a||b","expiryInSeconds":-1}`),
		req("GET", "/v1.0/healthz", ""),
		req("GET", "/v1.0/metadata", ""),
		req("DELETE", "/v1.0-alpha1/unlock/lockstore", ""),
		req("GET", "/v1.0/state/s/k", ""),
		[]byte("POST /v1.0-alpha1/lock/lockstore HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"res\r\n0\r\n\r\n"),
	} {
		f.Add(seed)
	}
	s := newSidecar(f, "fuzz", Config{Stores: DefaultStores(), AppID: "fuzz"})
	h := s.api.Handler()
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // not HTTP: the server's parser answers 400 before any handler
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(ctx))
		code := rec.Code
		if code >= 500 && code != http.StatusNotImplemented {
			t.Fatalf("%q: status %d: %s", raw, code, rec.Body.String())
		}
		if req.Method == http.MethodHead || code == http.StatusNoContent {
			return
		}
		var body struct {
			ErrorCode, Message string
			Success            *bool
			Status             *int
			ID                 *string
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%q: status %d, not JSON: %q", raw, code, rec.Body.String())
		}
		if code >= 400 && (body.ErrorCode == "" || body.Message == "") {
			t.Fatalf("%q: status %d without daprd's error body: %q", raw, code, rec.Body.String())
		}
		if code == http.StatusOK && body.Success == nil && body.Status == nil && req.URL.Path != metadataRoute {
			t.Fatalf("%q: 200 without success or status: %q", raw, rec.Body.String())
		}
	})
}
