package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/lockapi"
)

// TestClaimInput: every bad mode, limit or weight is a 400 with its own
// code and a message naming the field, and nothing reaches etcd.
func TestClaimInput(t *testing.T) {
	a := newAPI(t, "pod-a")
	for body, code := range map[string]string{
		`{"limit":0}`:                  lockapi.CodeInvalidLimit,
		`{"limit":-2}`:                 lockapi.CodeInvalidLimit,
		`{"limit":10001}`:              lockapi.CodeInvalidLimit,
		`{"limit":1e12}`:               lockapi.CodeInvalidLimit,
		`{"limit":2.5}`:                lockapi.CodeInvalidLimit,
		`{"limit":"4"}`:                lockapi.CodeInvalidLimit,
		`{"limit":4,"weight":5}`:       lockapi.CodeInvalidWeight,
		`{"limit":4,"weight":0}`:       lockapi.CodeInvalidWeight,
		`{"weight":2}`:                 lockapi.CodeInvalidWeight,
		`{"mode":"exclusive"}`:         lockapi.CodeInvalidMode,
		`{"mode":1}`:                   lockapi.CodeInvalidMode,
		`{"mode":"read","limit":4}`:    lockapi.CodeInvalidMode,
		`{"mode":"READ"}`:              lockapi.CodeInvalidMode,
		`{"limit":4,"limit":4}`:        lockapi.CodeInvalidJSON,
		`{"limits":4}`:                 lockapi.CodeInvalidRequest,
		`{"mode":"read","wait":"-1s"}`: lockapi.CodeInvalidWait,
	} {
		txns := a.calls.Txns()
		r := a.do("POST", "/v1/locks/claims", body).expect(t, http.StatusBadRequest, code)
		field := strings.TrimPrefix(code, "invalid_")
		if code == lockapi.CodeInvalidJSON || code == lockapi.CodeInvalidRequest {
			field = "limit"
		}
		if msg := r.str("message"); !strings.Contains(msg, field) {
			t.Errorf("%s: message %q does not name %s", body, msg, field)
		}
		if a.calls.Txns() != txns {
			t.Errorf("%s: a refused request wrote to etcd", body)
		}
	}
	a.do("POST", "/v1/locks/claims", `{"owner":"r","mode":"read"}`).expect(t, http.StatusOK, "")
	a.do("POST", "/v1/locks/claims:extend", `{"owner":"r","mode":"read"}`).expect(t, http.StatusBadRequest, lockapi.CodeInvalidRequest)
}

// TestLimitMismatch: a semaphore's callers that disagree on its limit are
// told the limit in force and who has it, as a 409 with a code of its own.
func TestLimitMismatch(t *testing.T) {
	a, b := newAPI(t, "pod-a"), newAPI(t, "pod-b")
	g := a.do("POST", "/v1/locks/tenant-1/pipelines", `{"owner":"p1","limit":2}`).expect(t, http.StatusOK, "")
	if g.num("limit") != 2 || g.num("weight") != 1 {
		t.Errorf("grant %s: want limit 2, weight 1", g.raw)
	}
	for _, body := range []string{`{"owner":"p2","limit":3}`, `{"owner":"p2"}`, `{"owner":"p2","mode":"read"}`} {
		r := b.do("POST", "/v1/locks/tenant-1/pipelines", body).expect(t, http.StatusConflict, lockapi.CodeLimitMismatch)
		if r.num("limit") != 2 || r.num("fence") != g.num("fence") || r.holder()["owner"] != "p1" || !strings.Contains(r.str("message"), "limit 2") {
			t.Errorf("%s: %s", body, r.raw)
		}
	}
	b.do("POST", "/v1/locks/tenant-1/pipelines", `{"owner":"p2","limit":2}`).expect(t, http.StatusOK, "")
	r := b.do("POST", "/v1/locks/tenant-1/pipelines", `{"owner":"p3","limit":2}`).expect(t, http.StatusConflict, lockapi.CodeAlreadyRunning)
	if r.holder()["owner"] != "p1" {
		t.Errorf("refusal names %v, want the first holder", r.holder())
	}
	st := a.do("GET", "/v1/locks/tenant-1/pipelines", "").expect(t, http.StatusOK, "")
	if st.num("limit") != 2 || st.num("held_units") != 2 || len(st.body["holders"].([]any)) != 2 {
		t.Errorf("status %s", st.raw)
	}
}
