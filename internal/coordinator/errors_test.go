package coordinator

import (
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
)

// TestHeldMessage: a refusal's message names the holder as it is, whether
// it is built in one buffer (a plain refusal) or with the rest of what a
// refusal may say.
func TestHeldMessage(t *testing.T) {
	k, err := keyspace.ParseKey("flows/7/phase-2")
	if err != nil {
		t.Fatal(err)
	}
	until := time.Date(2026, 11, 28, 13, 0, 0, 0, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		name string
		err  HeldError
		want string
	}{
		{"owner, pod and deadline", HeldError{Key: k, Holder: keyspace.Holder{Owner: "exec-1", Pod: "web-0", ExpiresAt: until}},
			`lock "flows/7/phase-2" is held by exec-1 (pod web-0) until 2026-11-28T12:00:00Z`},
		{"owner alone", HeldError{Key: k, Holder: keyspace.Holder{Owner: "exec-1"}}, `lock "flows/7/phase-2" is held by exec-1`},
		{"no owner", HeldError{Key: k, Holder: keyspace.Holder{Pod: "web-0"}}, `lock "flows/7/phase-2" is held by another caller of this sidecar`},
		{"not Baton", HeldError{Key: k, Holder: keyspace.Holder{Owner: "x", Foreign: true}},
			`lock "flows/7/phase-2" is held by a client that is not Baton (for example etcdctl lock)`},
		{"waited", HeldError{Key: k, Holder: keyspace.Holder{Owner: "exec-1"}, Waited: true, Wait: 2 * time.Second},
			`lock "flows/7/phase-2" is held by exec-1; gave up after waiting 2s`},
		{"fence mismatch", HeldError{Key: k, Holder: keyspace.Holder{Owner: "exec-1"}, Fence: 9, Mismatch: 7},
			`lock "flows/7/phase-2" is held by exec-1 with fence 9, not fence 7; nothing was released`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}
