package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
)

// watchLines opens a watch and returns a function reading its next event.
func watchLines(t *testing.T, a *api, path string) func() lockapi.WatchEvent {
	t.Helper()
	req, err := http.NewRequest("GET", "http://baton"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := make(chan lockapi.WatchEvent, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev lockapi.WatchEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				return
			}
			lines <- ev
		}
	}()
	var rev int64
	return func() lockapi.WatchEvent {
		t.Helper()
		for {
			select {
			case ev, ok := <-lines:
				if !ok {
					t.Fatal("the watch ended")
				}
				if ev.Revision < rev {
					t.Fatalf("revision went back: %+v after %d", ev, rev)
				}
				rev = ev.Revision
				if ev.Event != lockapi.WatchHeartbeat {
					return ev
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no event in 10s")
			}
		}
	}
}

// TestWatchStream: GET KEY:watch tells the lock's state, then its grants
// and releases as JSON lines; a leader's observers follow it this way.
func TestWatchStream(t *testing.T) {
	a, b := newAPI(t, "pod-a"), newAPI(t, "pod-b")
	next := watchLines(t, b, "/v1/locks/leader:watch")
	if ev := next(); ev.Event != lockapi.WatchState || ev.Key != "leader" || ev.Lock == nil || ev.Lock.Held {
		t.Fatalf("first line %+v, want the state of a free lock", ev)
	}
	if ev := next(); ev.Event != lockapi.WatchSynced {
		t.Fatalf("second line %+v, want synced", ev)
	}
	g := a.do("POST", "/v1/locks/leader", `{"owner":"replica-1"}`).expect(t, http.StatusOK, "")
	ev := next()
	if ev.Event != lockapi.WatchGranted || ev.Fence != g.num("fence") || ev.Holder == nil || ev.Holder.Owner != "replica-1" || ev.Holder.Pod != "pod-a" || ev.Revision != g.num("fence") {
		t.Fatalf("after the grant: %+v", ev)
	}
	a.do("DELETE", "/v1/locks/leader?owner=replica-1", "").expect(t, http.StatusOK, "")
	if ev := next(); ev.Event != lockapi.WatchReleased || ev.Fence != g.num("fence") || ev.Lock.Held {
		t.Fatalf("after the release: %+v", ev)
	}

	all := watchLines(t, b, "/v1/locks:watch?prefix=")
	if ev := all(); ev.Event != lockapi.WatchSynced {
		t.Fatalf("a watch of a scope with no lock: %+v, want synced at once", ev)
	}
	b.do("POST", "/v1/locks/any/key", `{"owner":"x"}`).expect(t, http.StatusOK, "")
	if ev := all(); ev.Event != lockapi.WatchGranted || ev.Key != "any/key" {
		t.Fatalf("%+v", ev)
	}
	b.do("POST", "/v1/locks/leader:watch", "").expect(t, http.StatusMethodNotAllowed, lockapi.CodeMethodNotAllowed)
	b.do("GET", "/v1/locks/leader:watch?prefix=x", "").expect(t, http.StatusBadRequest, lockapi.CodeInvalidRequest)
	b.do("GET", "/v1/locks:watch?prefix=a%20b", "").expect(t, http.StatusBadRequest, lockapi.CodeInvalidKey)
}
