package server

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/keyspace"
)

// TestLockDelayAPI: a holder with a lock delay that is forced free holds
// its lock back: a try is 409 lock_delayed naming it and when to retry.
func TestLockDelayAPI(t *testing.T) {
	a, b := newAPI(t, "pod-a", operators(t)), newAPI(t, "pod-b", operators(t))
	// Its marker outlives the test's sidecars: a key of this run's own.
	name := fmt.Sprintf("payments/batch-%d", time.Now().UnixNano())
	g := a.do("POST", "/v1/locks/"+name, `{"owner":"batch-1","lock_delay":"5s"}`).expect(t, http.StatusOK, "")
	k, _ := keyspace.ParseKey(name)
	if _, err := b.coord.ForceRelease(context.Background(), k, g.num("fence"), "test"); err != nil {
		t.Fatal(err)
	}
	r := b.do("POST", "/v1/locks/"+name, `{"owner":"batch-2"}`).expect(t, http.StatusConflict, lockapi.CodeLockDelayed)
	retry, err := time.Parse(time.RFC3339Nano, r.str("retry_at"))
	if err != nil || time.Until(retry) < 3*time.Second || r.holder()["owner"] != "batch-1" || r.num("fence") != g.num("fence") {
		t.Errorf("lock_delayed: %s", r.raw)
	}
	for body, code := range map[string]string{
		`{"lock_delay":"2h"}`:               lockapi.CodeInvalidLockDelay,
		`{"lock_delay":"-1s"}`:              lockapi.CodeInvalidLockDelay,
		`{"lock_delay":"1s","mode":"read"}`: lockapi.CodeInvalidLockDelay,
		`{"lock_delay":"1s","limit":3}`:     lockapi.CodeInvalidLockDelay,
		`{"lock_delay":"soon"}`:             lockapi.CodeInvalidLockDelay,
	} {
		a.do("POST", "/v1/locks/d", body).expect(t, http.StatusBadRequest, code)
	}
}
