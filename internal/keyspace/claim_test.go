package keyspace

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

var (
	excl  = Claim{}
	read  = Claim{Mode: Read}
	units = func(limit, weight int) Claim { return Claim{Limit: limit, Weight: weight} }
)

func TestHolders(t *testing.T) {
	for _, tc := range []struct {
		name string
		line []Claim
		want int
	}{
		{"empty", nil, 0},
		{"mutex", []Claim{excl, excl}, 1},
		{"readers share", []Claim{read, read, read}, 3},
		{"a queued writer stops later readers", []Claim{read, read, excl, read}, 2},
		{"a writer first holds alone", []Claim{excl, read, read}, 1},
		{"units up to the limit", []Claim{units(4, 1), units(4, 1), units(4, 1), units(4, 1), units(4, 1)}, 4},
		{"weights add up", []Claim{units(4, 2), units(4, 1), units(4, 1), units(4, 1)}, 3},
		{"no barging past a heavy claim", []Claim{units(4, 2), units(4, 3), units(4, 1)}, 1},
		{"weight 0 counts as 1", []Claim{units(2, 0), units(2, 0), units(2, 0)}, 2},
		{"a foreign contender stops a semaphore", []Claim{units(4, 1), excl, units(4, 1)}, 1},
		{"a reader stops a semaphore", []Claim{units(4, 1), read}, 1},
		{"a semaphore stops readers", []Claim{read, units(4, 1)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Holders(tc.line); got != tc.want {
				t.Fatalf("Holders(%v) = %d, want %d", tc.line, got, tc.want)
			}
		})
	}
}

// TestHoldersProperties checks, over random lines of every admission's
// claims, what the coordinator relies on: never more units held than the
// limit, never a writer with anyone, a claim that holds only alone
// (Admission.Alone) holds just when it is first, and a holder stays a
// holder whoever ahead of it leaves.
func TestHoldersProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	claims := []Claim{excl, read, read, units(4, 1), units(4, 2), units(4, 4)}
	for range 20000 {
		line := make([]Claim, r.IntN(8))
		for i := range line {
			line[i] = claims[r.IntN(len(claims))]
		}
		n := Holders(line)
		checkHeld(t, line[:n])
		for i, c := range line {
			// A claim that holds only alone holds just when it is first,
			// and then nobody holds beside it.
			if c.Admission().Alone() && (i < n) != (i == 0) {
				t.Fatalf("%v, alone, at %d of %v: %d hold", c, i, line, n)
			}
			if c.Admission().Alone() && i == 0 && n != 1 {
				t.Fatalf("%v, alone, first of %v: %d hold", c, line, n)
			}
		}
		for i := range n {
			// Whoever ahead of holder i leaves, i still holds.
			rest := []Claim{}
			for j := range i {
				if r.IntN(2) == 0 {
					rest = append(rest, line[j])
				}
			}
			rest = append(rest, line[i])
			if Holders(rest) != len(rest) {
				t.Fatalf("holder %d of %v is not one of %v", i, line, rest)
			}
		}
	}
}

func checkHeld(t *testing.T, held []Claim) {
	t.Helper()
	units, writers, readers := 0, 0, 0
	for _, c := range held {
		switch {
		case c.Limit > 0:
			units += c.Units()
		case c.Mode == Read:
			readers++
		default:
			writers++
		}
	}
	if units > 4 || writers > 1 || (writers == 1 && len(held) > 1) || (units > 0 && units != sumUnits(held)) {
		t.Fatalf("held together: %v", held)
	}
}

func sumUnits(cs []Claim) (n int) {
	for _, c := range cs {
		n += c.Units()
	}
	return n
}

// TestClaimRecord checks the record a mutex writes is unchanged (no claim
// fields) and that a claim survives the round trip.
func TestClaimRecord(t *testing.T) {
	var m map[string]any
	if err := json.Unmarshal([]byte(Holder{Owner: "a"}.Encode()), &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"mode", "limit", "weight"} {
		if _, ok := m[f]; ok {
			t.Errorf("a mutex record has %q: %v", f, m)
		}
	}
	h := Holder{Owner: "a", Claim: units(4, 2)}
	if got := DecodeHolder([]byte(h.Encode())); got.Claim != h.Claim {
		t.Fatalf("claim %+v came back as %+v", h.Claim, got.Claim)
	}
	if c := ClaimOf(DecodeHolder(nil)); !c.IsExclusive() {
		t.Fatalf("a foreign contender claims %+v", c)
	}
}

func TestInForce(t *testing.T) {
	line := []Holder{{Foreign: true}, {Owner: "a", Claim: units(3, 1)}, {Owner: "b"}}
	if c, ok := InForce(line); !ok || c.Limit != 3 {
		t.Fatalf("InForce = %+v, %v", c, ok)
	}
	if _, ok := InForce(line[:1]); ok {
		t.Fatal("a line of foreign contenders has a claim in force")
	}
}
