package keyspace

import (
	"errors"
	"testing"
)

// TestClaimNormal: each claim no lock can grant is refused naming its
// field; a valid one comes back in its one form.
func TestClaimNormal(t *testing.T) {
	for _, tt := range []struct {
		name  string
		in    Claim
		want  Claim
		field string // the field refused; "" when valid
	}{
		{"the mutex", Claim{}, Claim{}, ""},
		{"a reader", Claim{Mode: Read}, Claim{Mode: Read}, ""},
		{"a unit of a semaphore", Claim{Limit: 4}, Claim{Limit: 4, Weight: 1}, ""},
		{"a heavy claim", Claim{Limit: 4, Weight: 3}, Claim{Limit: 4, Weight: 3}, ""},
		{"a semaphore of one unit is the mutex", Claim{Limit: 1, Weight: 1}, Claim{}, ""},
		{"no such mode", Claim{Mode: "shared"}, Claim{}, "mode"},
		{"a negative limit", Claim{Limit: -1}, Claim{}, "limit"},
		{"too many units", Claim{Limit: MaxLimit + 1}, Claim{}, "limit"},
		{"a negative weight", Claim{Limit: 2, Weight: -1}, Claim{}, "weight"},
		{"a weight without a limit", Claim{Weight: 1}, Claim{}, "weight"},
		{"a weight past the limit", Claim{Limit: 2, Weight: 3}, Claim{}, "weight"},
		{"a reading semaphore", Claim{Mode: Read, Limit: 2}, Claim{}, "mode"},
	} {
		got, err := tt.in.Normal()
		var ce *ClaimError
		switch {
		case tt.field == "" && (err != nil || got != tt.want):
			t.Errorf("%s: Normal() = %+v, %v; want %+v", tt.name, got, err, tt.want)
		case tt.field != "" && (!errors.As(err, &ce) || ce.Field != tt.field || ce.Msg == ""):
			t.Errorf("%s: Normal() error %v; want one about %s", tt.name, err, tt.field)
		}
	}
}
