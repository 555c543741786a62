package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/engine"
)

func TestSession(t *testing.T) {
	a, b := newAPI(t, "api-7f9c"), newAPI(t, "api-b")

	g := a.do("POST", "/v1/locks/terraform-prod", `{"owner":"execution-abc123","ttl":"10m"}`).expect(t, 200, "")
	if g.body["granted"] != true || g.str("key") != "terraform-prod" || g.str("owner") != "execution-abc123" || g.num("fence") <= 0 || g.str("expires_at") == "" {
		t.Fatalf("grant %s", g.raw)
	}
	exp, err := time.Parse(time.RFC3339Nano, g.str("expires_at"))
	if err != nil || time.Until(exp) < 9*time.Minute {
		t.Errorf("expires_at %q, want about 10m from now", g.str("expires_at"))
	}
	again := a.do("POST", "/v1/locks/terraform-prod", `{"owner":"execution-abc123"}`).expect(t, 200, "")
	if again.num("fence") != g.num("fence") {
		t.Errorf("idempotent grant fence %d, want %d", again.num("fence"), g.num("fence"))
	}

	refused := b.do("POST", "/v1/locks/terraform-prod", `{"owner":"execution-def456"}`).expect(t, 409, "already_running")
	h := refused.holder()
	if refused.body["granted"] != false || h["owner"] != "execution-abc123" || h["pod"] != "api-7f9c" || h["acquired_at"] == nil || refused.num("fence") != g.num("fence") {
		t.Errorf("refusal %s", refused.raw)
	}
	wantMsg := fmt.Sprintf(`lock "terraform-prod" is held by execution-abc123 (pod api-7f9c) until %s`, exp.UTC().Format(time.RFC3339))
	if refused.str("message") != wantMsg {
		t.Errorf("message %q, want %q", refused.str("message"), wantMsg)
	}
	b.do("POST", "/v1/locks/terraform-prod", `{"owner":"execution-def456","wait":"200ms"}`).expect(t, 409, "wait_timeout")

	st := b.do("GET", "/v1/locks/terraform-prod", "").expect(t, 200, "")
	if st.body["held"] != true || st.holder()["owner"] != "execution-abc123" || st.num("fence") != g.num("fence") || st.str("expires_at") == "" || st.body["waiters"] != 0.0 {
		t.Errorf("status %s", st.raw)
	}
	list := b.do("GET", "/v1/locks?prefix=terraform", "").expect(t, 200, "")
	if locks, _ := list.body["locks"].([]any); len(locks) != 1 {
		t.Errorf("list %s", list.raw)
	}

	ext := a.do("POST", "/v1/locks/terraform-prod:extend", `{"owner":"execution-abc123","ttl":"20m"}`).expect(t, 200, "")
	if ext.num("fence") != g.num("fence") || ext.str("expires_at") <= g.str("expires_at") {
		t.Errorf("extend %s", ext.raw)
	}
	a.do("POST", "/v1/locks/terraform-prod:extend", `{"owner":"someone-else","ttl":"20m"}`).expect(t, 403, "not_owner")
	b.do("DELETE", "/v1/locks/terraform-prod?owner=execution-def456", "").expect(t, 403, "not_owner")

	// A waiter on b gets the lock when a releases it.
	waited := make(chan reply)
	go func() {
		r, err := b.try("POST", "/v1/locks/terraform-prod", `{"owner":"execution-def456","wait":"30s"}`)
		if err != nil {
			t.Error(err)
		}
		waited <- r
	}()
	time.Sleep(100 * time.Millisecond)
	rel := a.do("DELETE", "/v1/locks/terraform-prod?owner=execution-abc123", "").expect(t, 200, "")
	if rel.body["released"] != true || rel.str("held_for") == "" {
		t.Errorf("release %s", rel.raw)
	}
	w := (<-waited).expect(t, 200, "")
	if w.num("fence") <= g.num("fence") || w.str("owner") != "execution-def456" {
		t.Errorf("waiter grant %s", w.raw)
	}
	a.do("DELETE", "/v1/locks/terraform-prod?owner=execution-abc123", "").expect(t, 403, "not_owner")
	b.do("DELETE", "/v1/locks/terraform-prod?owner=execution-def456", "").expect(t, 200, "")
	b.do("DELETE", "/v1/locks/terraform-prod?owner=execution-def456", "").expect(t, 404, "not_held")
	free := b.do("GET", "/v1/locks/terraform-prod", "").expect(t, 200, "")
	if free.body["held"] != false {
		t.Errorf("free status %s", free.raw)
	}
}

func TestGeneratedOwnerAndLostLock(t *testing.T) {
	a := newAPI(t, "pod")
	g := a.do("POST", "/v1/locks/gen", "").expect(t, 200, "")
	if !strings.HasPrefix(g.str("owner"), "exec-") {
		t.Errorf("generated owner %q", g.str("owner"))
	}
	s := a.do("POST", "/v1/locks/short", `{"owner":"o","ttl":1}`).expect(t, 200, "")
	waitUntil(t, 10*time.Second, "the deadline to pass", func() bool {
		return a.do("GET", "/v1/locks/short", "").body["held"] == false
	})
	lost := a.do("DELETE", "/v1/locks/short?owner=o", "").expect(t, 410, "lock_lost")
	if lost.str("reason") != "expired" || lost.num("fence") != s.num("fence") {
		t.Errorf("lost %s", lost.raw)
	}
	a.do("POST", "/v1/locks/short:extend", `{"owner":"o","ttl":"1m"}`).expect(t, 410, "lock_lost")
}

func TestHealth(t *testing.T) {
	a := newAPI(t, "pod")
	a.do("GET", "/healthz", "").expect(t, 200, "")
	a.do("GET", "/readyz", "").expect(t, 200, "")
	a.coord.Shutdown()
	a.do("GET", "/readyz", "").expect(t, 503, "unavailable")
	a.do("GET", "/healthz", "").expect(t, 200, "")
	a.do("POST", "/v1/locks/late", "").expect(t, 503, "unavailable")
}

func TestVerbsAndPaths(t *testing.T) {
	a := newAPI(t, "pod")
	// A key whose last segment is a verb's name is an ordinary key.
	a.do("POST", "/v1/locks/flow/extend", `{"owner":"o"}`).expect(t, 200, "")
	a.do("POST", "/v1/locks/flow", `{"owner":"o"}`).expect(t, 200, "")
	a.do("POST", "/v1/locks/flow:hold2", `{"owner":"o"}`).expect(t, 404, "not_found")
	a.do("GET", "/v1/locks/flow:hold", "").expect(t, 405, "method_not_allowed")
	a.do("PUT", "/v1/locks/flow", `{"owner":"o"}`).expect(t, 405, "method_not_allowed")
	a.do("GET", "/v1/locks/flow:extend", "").expect(t, 405, "method_not_allowed")
	a.do("POST", "/v1/locks", "").expect(t, 405, "method_not_allowed")
	a.do("GET", "/v2/anything", "").expect(t, 404, "not_found")
}

// TestBadInput sends nonsense and checks each gets a 4xx with a code and a
// message, and that none reaches etcd.
func TestBadInput(t *testing.T) {
	a := newAPI(t, "pod", func(c *engine.Config, s *Config) { s.MaxBodyBytes = 64 << 10 })
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"malformed JSON", "POST", "/v1/locks/k", `{"owner":`, 400, "invalid_json"},
		{"not an object", "POST", "/v1/locks/k", `[1,2]`, 400, "invalid_json"},
		{"two objects", "POST", "/v1/locks/k", `{} {}`, 400, "invalid_json"},
		{"unknown field", "POST", "/v1/locks/k", `{"owner":"o","tll":"5m"}`, 400, "invalid_request"},
		{"owner not a string", "POST", "/v1/locks/k", `{"owner":42}`, 400, "invalid_owner"},
		{"owner with a space", "POST", "/v1/locks/k", `{"owner":"a b"}`, 400, "invalid_owner"},
		{"ttl not a duration", "POST", "/v1/locks/k", `{"ttl":"soon"}`, 400, "invalid_ttl"},
		{"ttl of the wrong type", "POST", "/v1/locks/k", `{"ttl":true}`, 400, "invalid_ttl"},
		{"negative ttl", "POST", "/v1/locks/k", `{"ttl":"-5s"}`, 400, "invalid_ttl"},
		{"ttl over max hold", "POST", "/v1/locks/k", `{"ttl":"100h"}`, 400, "invalid_ttl"},
		{"huge number ttl", "POST", "/v1/locks/k", `{"ttl":1e300}`, 400, "invalid_ttl"},
		{"negative wait", "POST", "/v1/locks/k", `{"wait":-1}`, 400, "invalid_wait"},
		{"wait over max", "POST", "/v1/locks/k", `{"wait":"2h"}`, 400, "invalid_wait"},
		{"wait of the wrong type", "POST", "/v1/locks/k", `{"wait":[1]}`, 400, "invalid_wait"},
		{"max_hold on a plain acquire", "POST", "/v1/locks/k", `{"max_hold":"1h"}`, 400, "invalid_max_hold"},
		{"max_hold over the sidecar's max hold", "POST", "/v1/locks/k:hold", `{"max_hold":"25h"}`, 400, "invalid_max_hold"},
		{"max_hold 0", "POST", "/v1/locks/k:hold", `{"max_hold":0}`, 400, "invalid_max_hold"},
		{"max_hold under 1s", "POST", "/v1/locks/k:hold", `{"max_hold":"10ms"}`, 400, "invalid_max_hold"},
		{"max_hold not a duration", "POST", "/v1/locks/k:hold", `{"max_hold":"forever"}`, 400, "invalid_max_hold"},
		{"extend with a max_hold", "POST", "/v1/locks/k:extend", `{"owner":"o","max_hold":"1h"}`, 400, "invalid_max_hold"},
		{"query on acquire", "POST", "/v1/locks/k?owner=x", ``, 400, "invalid_request"},
		{"bad key character", "POST", "/v1/locks/a%20b", ``, 400, "invalid_key"},
		{"dot-dot segment", "POST", "/v1/locks/a/../b", ``, 400, "invalid_key"},
		{"empty segment", "POST", "/v1/locks/a//b", ``, 400, "invalid_key"},
		{"too many segments", "POST", "/v1/locks/1/2/3/4/5/6/7/8/9", ``, 400, "invalid_key"},
		{"segment too long", "POST", "/v1/locks/" + strings.Repeat("x", 129), ``, 400, "invalid_key"},
		{"release without owner", "DELETE", "/v1/locks/k", ``, 400, "invalid_owner"},
		{"release with a bad owner", "DELETE", "/v1/locks/k?owner=%00", ``, 400, "invalid_owner"},
		{"release with two owners", "DELETE", "/v1/locks/k?owner=a&owner=b", ``, 400, "invalid_request"},
		{"extend without owner", "POST", "/v1/locks/k:extend", `{"ttl":"1m"}`, 400, "invalid_owner"},
		{"extend with a wait", "POST", "/v1/locks/k:extend", `{"owner":"o","wait":"1s"}`, 400, "invalid_wait"},
		{"list with a bad prefix", "GET", "/v1/locks?prefix=a%25", ``, 400, "invalid_key"},
		{"list with an unknown parameter", "GET", "/v1/locks?limit=5", ``, 400, "invalid_request"},
		{"body too large", "POST", "/v1/locks/k", `{"owner":"` + strings.Repeat("o", 70<<10) + `"}`, 413, "body_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			txns, puts := a.calls.Txns(), a.calls.Puts()
			a.do(tt.method, tt.path, tt.body).expect(t, tt.status, tt.code)
			if a.calls.Txns() != txns || a.calls.Puts() != puts {
				t.Errorf("bad input wrote to etcd")
			}
		})
	}
}

// The 413 says what the limit is.
func TestBodyTooLargeNamesTheLimit(t *testing.T) {
	a := newAPI(t, "pod", func(_ *engine.Config, s *Config) { s.MaxBodyBytes = 4096 })
	r := a.do("POST", "/v1/locks/k", `{"owner":"`+strings.Repeat("o", 5000)+`"}`).expect(t, 413, lockapi.CodeBodyTooLarge)
	if !strings.Contains(r.str("message"), "4096 bytes") {
		t.Errorf("message %q does not give the limit", r.str("message"))
	}
}

func TestTooManyWaiters(t *testing.T) {
	a := newAPI(t, "pod", func(c *engine.Config, _ *Config) { c.Coordinator.MaxWaiters = 1 })
	a.do("POST", "/v1/locks/q", `{"owner":"holder"}`).expect(t, 200, "")
	go a.try("POST", "/v1/locks/q", `{"owner":"w1","wait":"2s"}`)
	time.Sleep(200 * time.Millisecond)
	a.do("POST", "/v1/locks/q", `{"owner":"w2","wait":"2s"}`).expect(t, http.StatusTooManyRequests, "too_many_waiters")
}

func TestForceRelease(t *testing.T) {
	a, b := newAPI(t, "pod-a", operators(t)), newAPI(t, "pod-b", operators(t))
	g := a.do("POST", "/v1/locks/stuck", `{"owner":"victim"}`).expect(t, 200, "")
	fence := g.num("fence")

	mm := b.do("DELETE", fmt.Sprintf("/v1/locks/stuck?force=true&fence=%d", fence+100), "").expect(t, 409, "fence_mismatch")
	if mm.holder()["owner"] != "victim" || mm.num("fence") != fence {
		t.Errorf("mismatch answer %s", mm.raw)
	}
	for _, q := range []string{"force=maybe", "force=true&owner=x", "force=true&fence=abc", "force=true&fence=-1", "fence=1&owner=victim"} {
		b.do("DELETE", "/v1/locks/stuck?"+q, "").expect(t, 400, "invalid_request")
	}
	f := b.do("DELETE", fmt.Sprintf("/v1/locks/stuck?force=true&fence=%d&by=ops-alice", fence), "").expect(t, 200, "")
	if f.body["forced"] != true || f.holder()["owner"] != "victim" || f.num("fence") != fence {
		t.Errorf("force answer %s", f.raw)
	}
	// The holder's sidecar tells its owner.
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := a.do("DELETE", "/v1/locks/stuck?owner=victim", "")
		if r.status == 410 {
			r.expect(t, 410, "lock_lost")
			if r.str("reason") != "force_released" {
				t.Errorf("lost answer %s", r.raw)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the holder was not told: %s", r.raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.do("DELETE", "/v1/locks/stuck?force=true", "").expect(t, 404, "not_held")
	// Without a fence, whoever holds it now is released.
	b.do("POST", "/v1/locks/stuck", `{"owner":"next"}`).expect(t, 200, "")
	b.do("DELETE", "/v1/locks/stuck?force=true", "").expect(t, 200, "")
}
