package keyspace

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestElectionsLayout: an election's keys are etcd's concurrency.Election
// layout under the scope's elections, apart from the lock of the same
// name, and the sidecars' etcd role covers them.
func TestElectionsLayout(t *testing.T) {
	locks, err := NewLayout("team-a")
	if err != nil {
		t.Fatal(err)
	}
	elections := locks.In(Elections)
	k, _ := ParseKey("jobs/scheduler")
	if got, want := elections.ContenderKey(k, 0x694d), "/baton/v1/team-a/elections/jobs%2Fscheduler/694d"; got != want {
		t.Errorf("an election's contender key %q, want %q", got, want)
	}
	if got := locks.ContenderKey(k, 0x694d); got != "/baton/v1/team-a/locks/jobs%2Fscheduler/694d" {
		t.Errorf("the lock's contender key %q", got)
	}
	if elections.Delay(k) == locks.Delay(k) || elections.Space() != Elections || locks.Space() != Locks || elections.Scope() != "team-a" {
		t.Errorf("the spaces share a lock-delay marker or lost their names: %q %q", elections.Delay(k), locks.Delay(k))
	}
	if got, _, ok := elections.ParseContender("/baton/v1/team-a/elections/jobs%2Fscheduler/694d"); !ok || got != k {
		t.Errorf("ParseContender of an election's key: %v %v", got, ok)
	}
	if _, _, ok := locks.ParseContender("/baton/v1/team-a/elections/jobs%2Fscheduler/694d"); ok {
		t.Error("the locks' layout parses an election's key")
	}
	if back := elections.In(Locks); back != locks {
		t.Errorf("the locks' layout again: %+v, want %+v", back, locks)
	}
	var writable []string
	for _, g := range locks.SidecarGrants() {
		if g.Write {
			writable = append(writable, g.Key)
		}
	}
	for _, p := range []string{elections.Base(), elections.DelayPrefix(), locks.Base(), locks.DelayPrefix()} {
		if !slices.Contains(writable, p) {
			t.Errorf("the sidecars' role does not let them write %s: %v", p, writable)
		}
	}
}

// TestForeignValue: a contender that is not Baton's (etcdctl elect) is
// told with its value, cut at MaxValue bytes on a character's start; a
// Baton record keeps the value it announced.
func TestForeignValue(t *testing.T) {
	if h := DecodeHolder([]byte("10.0.0.9:8080")); !h.Foreign || h.Value != "10.0.0.9:8080" || h.Owner != "" {
		t.Errorf("etcdctl elect's value: %+v", h)
	}
	long := strings.Repeat("é", MaxValue) // 2 bytes each
	if h := DecodeHolder([]byte(long)); len(h.Value) != MaxValue || !utf8.ValidString(h.Value) {
		t.Errorf("a long foreign value is cut to %d bytes (valid UTF-8: %v), want %d", len(h.Value), utf8.ValidString(h.Value), MaxValue)
	}
	if h := DecodeHolder([]byte(Holder{Owner: "o", Value: "v"}.Encode())); h.Foreign || h.Value != "v" {
		t.Errorf("a Baton record: %+v", h)
	}
}
