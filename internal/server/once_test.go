package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
)

// TestRunOnceAPI: a run-once call over the socket runs the first caller,
// tells the others who runs it, and once :done recorded a success answers
// already_done with the record, writing nothing.
func TestRunOnceAPI(t *testing.T) {
	a, b := newAPI(t, "pod-a"), newAPI(t, "pod-b")
	// Run-once records outlive the test's sidecars: a key of this run's own.
	k := fmt.Sprintf("migrate/v%d", time.Now().UnixNano())
	g := a.do("POST", "/v1/locks/"+k, `{"owner":"deploy-1","once":true}`).expect(t, http.StatusOK, "")
	r := b.do("POST", "/v1/locks/"+k, `{"owner":"deploy-2","once":true}`).expect(t, http.StatusConflict, lockapi.CodeAlreadyRunning)
	if r.holder()["owner"] != "deploy-1" {
		t.Errorf("refusal names %v", r.holder())
	}
	done := a.do("POST", "/v1/locks/"+k+":done", `{"owner":"deploy-1","ok":true,"result":"schema v42"}`).expect(t, http.StatusOK, "")
	if done.str("status") != "succeeded" || done.num("fence") != g.num("fence") || done.str("result") != "schema v42" || done.str("expires_at") == "" {
		t.Fatalf("finish: %s", done.raw)
	}
	txns := b.calls.Txns()
	r = b.do("POST", "/v1/locks/"+k, `{"owner":"deploy-3","once":true}`).expect(t, http.StatusConflict, lockapi.CodeAlreadyDone)
	run, _ := r.body["run"].(map[string]any)
	if run["owner"] != "deploy-1" || run["result"] != "schema v42" || r.body["granted"] != false || !strings.Contains(r.str("message"), "already done") {
		t.Errorf("already done: %s", r.raw)
	}
	if b.calls.Txns() != txns {
		t.Error("an already_done answer wrote to etcd")
	}
	if got := b.do("GET", "/v1/locks/"+k+":done", "").expect(t, http.StatusOK, ""); got.str("owner") != "deploy-1" {
		t.Errorf("GET :done: %s", got.raw)
	}

	// On a hold stream: refused before the stream starts.
	b.do("POST", "/v1/locks/"+k+":hold", `{"owner":"deploy-4","once":true}`).expect(t, http.StatusConflict, lockapi.CodeAlreadyDone)
}

func TestRunOnceInput(t *testing.T) {
	a := newAPI(t, "pod-a")
	a.do("POST", "/v1/locks/m", `{"owner":"runner","once":true}`).expect(t, http.StatusOK, "")
	for body, code := range map[string]string{
		`{"once":"yes"}`:                             lockapi.CodeInvalidRequest,
		`{"if_done":"rerun"}`:                        lockapi.CodeInvalidRequest,
		`{"once":true,"if_done":"always"}`:           lockapi.CodeInvalidRequest,
		`{"once":true,"if_failed":3}`:                lockapi.CodeInvalidRequest,
		`{"once":true,"limit":3}`:                    lockapi.CodeInvalidRequest,
		`{"owner":"runner","once":true,"wait":"5s"}`: lockapi.CodeInvalidRequest,
	} {
		txns := a.calls.Txns()
		a.do("POST", "/v1/locks/m", body).expect(t, http.StatusBadRequest, code)
		if a.calls.Txns() != txns {
			t.Errorf("%s: wrote to etcd", body)
		}
	}
	for body, code := range map[string]string{
		`{"ok":true}`:                             lockapi.CodeInvalidOwner,
		`{"owner":"runner"}`:                      lockapi.CodeInvalidRequest,
		`{"owner":"runner","ok":"yes"}`:           lockapi.CodeInvalidRequest,
		`{"owner":"runner","ok":true,"x":1}`:      lockapi.CodeInvalidRequest,
		`{"owner":"runner","ok":true,"ok":false}`: lockapi.CodeInvalidRequest,
		`{"owner":"runner","ok":true,"result":"` + strings.Repeat("r", 4097) + `"}`: lockapi.CodeInvalidRequest,
	} {
		a.do("POST", "/v1/locks/m:done", body).expect(t, http.StatusBadRequest, code)
	}
	a.do("POST", "/v1/locks/m:extend", `{"owner":"runner","once":true}`).expect(t, http.StatusBadRequest, lockapi.CodeInvalidRequest)
	a.do("DELETE", "/v1/locks/m:done", "").expect(t, http.StatusMethodNotAllowed, lockapi.CodeMethodNotAllowed)
}
