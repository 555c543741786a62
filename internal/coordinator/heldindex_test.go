package coordinator

import (
	"fmt"
	"testing"
)

// TestHeldIndexTellsKeysApart: a delete of another sidecar's key is never
// looked at under the engine's mutex, even when it shares a held key's
// slot in the table of counts; this sidecar's own key of that slot is
// (it may be held), and one whose slot is empty is not, and is noted as
// missed for a grant to find.
func TestHeldIndexTellsKeysApart(t *testing.T) {
	x := newHeldIndex()
	const pfx = "/baton/v1/s/locks/"
	x.ours("1a") // this sidecar's session
	mineHeld := &held{etcdKey: pfx + "job/1a"}
	x.add(mineHeld)
	var other, mine, free string
	for i := 0; other == "" || mine == "" || free == ""; i++ {
		if i == 1<<22 {
			t.Fatal("no keys found for every case")
		}
		o, m := fmt.Sprintf("%sother-%d/2b", pfx, i), fmt.Sprintf("%smine-%d/1a-0000002a", pfx, i)
		if other == "" && x.slot(o) == x.slot(mineHeld.etcdKey) {
			other = o
		}
		switch {
		case mine == "" && x.slot(m) == x.slot(mineHeld.etcdKey):
			mine = m
		case free == "" && x.slot(m).Load() == 0:
			free = m
		}
	}
	if x.deleted(other, 10) {
		t.Errorf("another sidecar's key %s, in a held key's slot, may be held here", other)
	}
	if !x.deleted(mineHeld.etcdKey, 11) || !x.deleted(mine, 12) {
		t.Errorf("a held key, or this sidecar's key in its slot (%s), is said not held here", mine)
	}
	if x.deleted(free, 13) || x.missed.of(free) != 13 {
		t.Errorf("a key of an empty slot, %s: held, or its delete not noted (%d)", free, x.missed.of(free))
	}
	if x.missed.of(other) != 0 {
		t.Error("another sidecar's key's delete was noted for a grant here")
	}
	x.remove(mineHeld)
	if x.deleted(mineHeld.etcdKey, 14) || x.len() != 0 {
		t.Errorf("a key removed is still counted (%d held)", x.len())
	}
	// A key of the process before, taken over: its session becomes ours.
	adopted := &held{etcdKey: pfx + "kept/3c-d"}
	x.add(adopted)
	if !x.deleted(adopted.etcdKey, 15) {
		t.Error("a key taken over from the process before is said not held here")
	}
}
