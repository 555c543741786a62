package lockapi

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestWireShapes pins the JSON of each body: the names apps and README's
// clients read, times in UTC RFC 3339, absent fields left out. Each is
// read back into an equal value, as the Go client reads it.
func TestWireShapes(t *testing.T) {
	at := time.Date(2026, 11, 25, 3, 4, 5, 600_000_000, time.UTC)
	later := at.Add(5 * time.Minute)
	no := false
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"grant", &Grant{Granted: true, Key: "deploy/prod", Owner: "run-42", Fence: 7, AcquiredAt: at, ExpiresAt: later},
			`{"granted":true,"key":"deploy/prod","owner":"run-42","fence":7,"acquired_at":"2026-11-25T03:04:05.6Z","expires_at":"2026-11-25T03:09:05.6Z"}`},
		{"free lock", &Status{Key: "k"}, `{"key":"k","held":false,"waiters":0}`},
		{"held lock", &Status{Key: "k", Held: true, Holder: &Holder{Owner: "o", Pod: "p", AcquiredAt: at}, Fence: 3, ExpiresAt: later, Waiters: 2},
			`{"key":"k","held":true,"holder":{"owner":"o","pod":"p","acquired_at":"2026-11-25T03:04:05.6Z"},"fence":3,"expires_at":"2026-11-25T03:09:05.6Z","waiters":2}`},
		{"list", &List{Locks: []Status{{Key: "a"}}}, `{"locks":[{"key":"a","held":false,"waiters":0}]}`},
		{"released", &Released{Released: true, Key: "k", Owner: "o", Fence: 3, HeldFor: "1.5s", HeldSeconds: 1.5},
			`{"released":true,"key":"k","owner":"o","fence":3,"held_for":"1.5s","held_for_seconds":1.5}`},
		{"forced", &Forced{Released: true, Forced: true, Key: "k", Fence: 3, Holder: &Holder{Owner: "o", Foreign: true}},
			`{"released":true,"forced":true,"key":"k","fence":3,"holder":{"owner":"o","foreign":true}}`},
		{"queued event", &Event{Event: EventQueued, Key: "k", Owner: "o", Position: 2, At: at},
			`{"event":"queued","key":"k","owner":"o","position":2,"at":"2026-11-25T03:04:05.6Z"}`},
		{"refusal", &Error{Status: 409, Granted: &no, Code: CodeAlreadyRunning, Message: "held", Key: "k", Holder: &Holder{Owner: "x"}, Fence: 3},
			`{"granted":false,"code":"already_running","message":"held","key":"k","holder":{"owner":"x"},"fence":3}`},
		{"lost", &Error{Status: 410, Code: CodeLockLost, Message: "lost", Key: "k", Fence: 3, Reason: "expired", EndedAt: at},
			`{"code":"lock_lost","message":"lost","key":"k","fence":3,"reason":"expired","ended_at":"2026-11-25T03:04:05.6Z"}`},
		{"request", &Request{Owner: "o", Wait: "30s"}, `{"owner":"o","wait":"30s"}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(b) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, b, c.want)
		}
		back := reflect.New(reflect.TypeOf(c.v).Elem())
		if err := json.Unmarshal(b, back.Interface()); err != nil {
			t.Fatalf("%s: read back: %v", c.name, err)
		}
		if e, ok := c.v.(*Error); ok {
			back.Interface().(*Error).Status = e.Status // not in the body
		}
		if !reflect.DeepEqual(back.Interface(), c.v) {
			t.Errorf("%s: read back as %+v, want %+v", c.name, back.Elem().Interface(), reflect.ValueOf(c.v).Elem().Interface())
		}
	}
	if got := (&Error{Status: 409, Code: CodeAlreadyRunning, Message: "held"}).Error(); got != "held (409 already_running)" {
		t.Errorf("Error() = %q", got)
	}
	if got := (&Error{Code: CodeWaitTimeout, Message: "not granted"}).Error(); got != "not granted (wait_timeout)" {
		t.Errorf("Error() of a stream's refusal = %q", got)
	}
}

// TestImportsOnlyTheStandardLibrary: the contract stays usable by any Go
// program, without Baton's dependencies.
func TestImportsOnlyTheStandardLibrary(t *testing.T) {
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %s: lockapi takes only the standard library", name, path)
			}
		}
	}
}
