package restart

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/coordinator"
)

func heldLock(key string, fence int64, exp time.Time) coordinator.HeldLock {
	return coordinator.HeldLock{Key: key, Owner: "o-" + key, Fence: fence, AcquiredAt: exp.Add(-time.Minute), ExpiresAt: exp}
}

// TestStateJournal: the state file is a snapshot followed by appended
// changes; reading it replays them, ignores a last line cut short by a
// crash, and refuses a corrupt line in the middle.
func TestStateJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.state")
	t0 := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	w := &stateWriter{path: path, scope: "team-a"}
	defer w.closeFile()
	if err := w.snapshot([]coordinator.HeldLock{heldLock("a", 10, t0), heldLock("b", 11, t0)}, nil, []string{"1f"}, 0); err != nil {
		t.Fatal(err)
	}
	changes := []coordinator.HeldChange{
		{Lock: heldLock("a", 10, t0), Ended: true},     // released
		{Lock: heldLock("b", 11, t0.Add(time.Hour))},   // extended
		{Lock: heldLock("c", 12, t0)},                  // granted
		{Lock: heldLock("c", 9, t0), Ended: true},      // an older holder's end: no effect
		{Lock: heldLock("a", 13, t0.Add(2*time.Hour))}, // a again, new fence
		{Lock: heldLock("d", 14, t0)}, {Lock: heldLock("d", 14, t0), Ended: true},
	}
	if err := w.append(changes, []string{"1f", "2e"}, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.append(nil, []string{"1f", "2e"}, 0); err != nil || w.lines != 1+2+1+len(changes) {
		t.Fatalf("an empty append wrote lines: %d lines, %v", w.lines, err)
	}

	check := func() {
		t.Helper()
		s, err := Read(path)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(s.Locks, func(x, y coordinator.HeldLock) int { return strings.Compare(x.Key, y.Key) })
		want := []coordinator.HeldLock{heldLock("a", 13, t0.Add(2*time.Hour)), heldLock("b", 11, t0.Add(time.Hour)), heldLock("c", 12, t0)}
		if s.Scope != "team-a" || !slices.Equal(s.Leases, []string{"1f", "2e"}) || len(s.Locks) != len(want) {
			t.Fatalf("replayed %+v; want scope team-a, leases [1f 2e], locks %+v", s, want)
		}
		for i := range want {
			if g := s.Locks[i]; g.Key != want[i].Key || g.Fence != want[i].Fence || !g.ExpiresAt.Equal(want[i].ExpiresAt) || g.Owner != want[i].Owner {
				t.Errorf("lock %d: %+v; want %+v", i, g, want[i])
			}
		}
	}
	check()

	// A crash in the middle of an append leaves a partial last line.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"held":{"key":"e","own`)
	f.Close()
	check()

	// A corrupt line that is not the last is an error, not a guess.
	b, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(b), `{"ended"`, `{"ended"}`, 1)), 0o600)
	if _, err := Read(path); err == nil || !strings.Contains(err.Error(), "line 5") {
		t.Errorf("corrupt line 5: %v; want an error naming it", err)
	}

	os.WriteFile(path, []byte(`{"held":{"key":"a","fence":1}}`+"\n"), 0o600)
	if _, err := Read(path); err == nil {
		t.Error("a file without a scope line was read")
	}
	if s, err := Read(filepath.Join(t.TempDir(), "none")); err != nil || len(s.Locks) != 0 {
		t.Errorf("missing file: %+v, %v", s, err)
	}
}

// TestStateJournalCompaction: the writer asks for a snapshot once the
// journal holds more than twice the lines the held locks need.
func TestStateJournalCompaction(t *testing.T) {
	w := &stateWriter{path: filepath.Join(t.TempDir(), "s.state"), scope: "x"}
	defer w.closeFile()
	if err := w.snapshot(nil, nil, []string{"1"}, 0); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	for i := range 600 { // 1200 lines for locks that come and go
		l := heldLock("k", int64(i), t0)
		if err := w.append([]coordinator.HeldChange{{Lock: l}, {Lock: l, Ended: true}}, []string{"1"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if !w.compactable(1) || w.compactable(200) {
		t.Errorf("%d lines: compactable(1)=%v compactable(200)=%v; want true, false", w.lines, w.compactable(1), w.compactable(200))
	}
	if err := w.remove(); err != nil || w.f != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(w.path); !os.IsNotExist(err) {
		t.Errorf("state file still there after remove: %v", err)
	}
}

// TestStateFileFormat pins the file's lines: a sidecar upgraded between a
// crash and its restart reads what the older one wrote.
func TestStateFileFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.state")
	t0 := time.Date(2026, 11, 25, 4, 0, 0, 0, time.UTC)
	w := &stateWriter{path: path, scope: "team-a"}
	defer w.closeFile()
	lost := []coordinator.LostLock{{Key: "c", Owner: "run-0", Fence: 7, Reason: coordinator.Shutdown, At: t0, ExpiresAt: t0.Add(time.Hour)}}
	if err := w.snapshot([]coordinator.HeldLock{{Key: "a/b", Owner: "run-1", Fence: 10, Hold: true, AcquiredAt: t0, ExpiresAt: t0.Add(time.Minute)}}, lost, []string{"1f"}, 12); err != nil {
		t.Fatal(err)
	}
	if err := w.append([]coordinator.HeldChange{{Lock: coordinator.HeldLock{Key: "a/b", Fence: 10}, Ended: true}}, []string{"1f", "2e"}, 14); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"scope":"team-a","leases":["1f"],"high":12}
{"held":{"key":"a/b","owner":"run-1","fence":10,"hold":true,"acquired_at":"2026-11-25T04:00:00Z","expires_at":"2026-11-25T04:01:00Z"}}
{"lost":{"key":"c","owner":"run-0","fence":7,"reason":"shutdown","at":"2026-11-25T04:00:00Z","expires_at":"2026-11-25T05:00:00Z"}}
{"leases":["1f","2e"]}
{"high":14}
{"ended":{"key":"a/b","fence":10}}
`
	if string(got) != want {
		t.Errorf("the state file:\n%s\nwant\n%s", got, want)
	}
	s, err := Read(path)
	if err != nil || s.Scope != "team-a" || len(s.Locks) != 0 || !slices.Equal(s.Leases, []string{"1f", "2e"}) || len(s.Lost) != 1 || s.Lost[0] != lost[0] || s.High != 14 {
		t.Errorf("Read: %+v, %v", s, err)
	}
}
