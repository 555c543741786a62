package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/baton-dev/baton/clients/go/lockapi"
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
		`{"limit":4,"limit":4}`:        lockapi.CodeInvalidRequest,
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
		// A value of the wrong type is told as such, not as out of range.
		if msg := r.str("message"); (body == `{"limit":"4"}` || body == `{"mode":1}`) && !strings.Contains(msg, "must be a") {
			t.Errorf("%s: message %q does not say the type is wrong", body, msg)
		}
		if msg := r.str("message"); body == `{"limit":4,"limit":4}` && !strings.Contains(msg, "more than once") {
			t.Errorf("%s: message %q does not say the field is repeated", body, msg)
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
	// A full semaphore's refusal names every holder, not the first alone.
	holders, _ := r.body["holders"].([]any)
	if msg := r.str("message"); len(holders) != 2 || !strings.Contains(msg, `semaphore "tenant-1/pipelines" is full: 2 of 2 units held, by p1 (pod pod-a)`) || !strings.Contains(msg, " and p2 (pod pod-b)") {
		t.Errorf("refusal of a full semaphore: %s; want both holders named and listed", r.raw)
	}
	w := b.do("POST", "/v1/locks/tenant-1/pipelines", `{"owner":"p3","limit":2,"wait":"100ms"}`).expect(t, http.StatusConflict, lockapi.CodeWaitTimeout)
	if holders, _ := w.body["holders"].([]any); len(holders) != 2 || !strings.Contains(w.str("message"), "p2 (pod pod-b)") {
		t.Errorf("a wait that ran out on a full semaphore: %s; want both holders", w.raw)
	}
	st := a.do("GET", "/v1/locks/tenant-1/pipelines", "").expect(t, http.StatusOK, "")
	if st.num("limit") != 2 || st.num("held_units") != 2 || len(st.body["holders"].([]any)) != 2 {
		t.Errorf("status %s", st.raw)
	}
}

// TestReadersRefuseAWriterByName: a writer refused by a lock that readers
// share hears of every reader.
func TestReadersRefuseAWriterByName(t *testing.T) {
	a, b := newAPI(t, "pod-a"), newAPI(t, "pod-b")
	a.do("POST", "/v1/locks/report", `{"owner":"r1","mode":"read"}`).expect(t, http.StatusOK, "")
	b.do("POST", "/v1/locks/report", `{"owner":"r2","mode":"read"}`).expect(t, http.StatusOK, "")
	r := b.do("POST", "/v1/locks/report", `{"owner":"w","mode":"write"}`).expect(t, http.StatusConflict, lockapi.CodeAlreadyRunning)
	holders, _ := r.body["holders"].([]any)
	if msg := r.str("message"); len(holders) != 2 || !strings.Contains(msg, `lock "report" is held by 2 readers: r1 (pod pod-a)`) || !strings.Contains(msg, "and r2 (pod pod-b)") {
		t.Errorf("a writer's refusal: %s; want both readers named and listed", r.raw)
	}
}

// TestSemaphoreWithoutRoomSaysSo: a caller refused by a semaphore that has
// units left, but fewer than its weight, is not told the semaphore is full.
func TestSemaphoreWithoutRoomSaysSo(t *testing.T) {
	a := newAPI(t, "pod-a")
	a.do("POST", "/v1/locks/gpu", `{"owner":"big","limit":3,"weight":2}`).expect(t, http.StatusOK, "")
	r := a.do("POST", "/v1/locks/gpu", `{"owner":"also-big","limit":3,"weight":2}`).expect(t, http.StatusConflict, lockapi.CodeAlreadyRunning)
	if msg := r.str("message"); strings.Contains(msg, "is full") || !strings.Contains(msg, `semaphore "gpu" has no room for this caller`) || !strings.Contains(msg, "2 of 3 units held, by big (pod pod-a)") {
		t.Errorf("refusal %q; want no room, not full, with the units held", msg)
	}
}
