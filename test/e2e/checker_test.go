//go:build e2e

package e2e

import (
	"testing"
	"time"
)

// TestCheckersCatchDoubleHolders: the checks can fail. A history in which
// two owners hold one lock at once is Illegal to porcupine, counts as a
// belief overlap, and a fence granted twice or used by another owner
// breaks the fence invariant; a proper hand-off passes all of them.
func TestCheckersCatchDoubleHolders(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	st := &store{fenced: true, locks: map[string]*storeLock{}}
	good := []histOp{
		{Client: 0, Owner: "a", Lock: "l", Kind: opAcquire, Result: resOK, Fence: 5, Call: ms(0), Return: ms(1)},
		{Client: 0, Owner: "a", Lock: "l", Kind: opRelease, Result: resOK, Fence: 5, Call: ms(2), Return: ms(4), Told: ms(2)},
		{Client: 1, Owner: "b", Lock: "l", Kind: opAcquire, Result: resOK, Fence: 7, Call: ms(1), Return: ms(3)},
		{Client: 1, Owner: "b", Lock: "l", Kind: opRelease, Result: resOK, Fence: 7, Call: ms(5), Return: ms(6), Told: ms(5)},
	}
	st.check("l", 5, "a", "write")
	st.check("l", 7, "b", "write")
	o := analyze("good", good, st)
	checkLinearizable(o, good, "")
	if o.porcupine != "Ok" || o.overlaps != 0 || len(o.fenceErrors) != 0 {
		t.Errorf("a proper hand-off: porcupine %s, %d overlaps, fence errors %v", o.porcupine, o.overlaps, o.fenceErrors)
	}

	bad := []histOp{
		{Client: 0, Owner: "a", Lock: "l", Kind: opAcquire, Result: resOK, Fence: 5, Call: ms(0), Return: ms(1)},
		{Client: 1, Owner: "b", Lock: "l", Kind: opAcquire, Result: resOK, Fence: 5, Call: ms(2), Return: ms(3)},
		{Client: 0, Owner: "a", Lock: "l", Kind: opRelease, Result: resOK, Fence: 5, Call: ms(4), Return: ms(5), Told: ms(4)},
		{Client: 1, Owner: "b", Lock: "l", Kind: opRelease, Result: resOK, Fence: 5, Call: ms(6), Return: ms(7), Told: ms(6)},
	}
	st2 := &store{fenced: true, locks: map[string]*storeLock{}}
	st2.check("l", 9, "c", "write")
	o = analyze("bad", bad, st2)
	checkLinearizable(o, bad, "")
	if o.porcupine != "Illegal" {
		t.Errorf("two holders at once: porcupine %s, want Illegal", o.porcupine)
	}
	if o.overlaps == 0 {
		t.Error("two holders at once: no belief overlap counted")
	}
	if len(o.fenceErrors) < 2 {
		t.Errorf("fence 5 granted twice and fence 9 never granted: fence errors %v", o.fenceErrors)
	}
}

// TestCheckersCountSemaphoreHolders: for a semaphore, holders overlap up
// to its limit and no further; one more is a belief overlap.
func TestCheckersCountSemaphoreHolders(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	hist := func(n int) []histOp {
		var ops []histOp
		for i := range n {
			owner := string(rune('a' + i))
			ops = append(ops,
				histOp{Client: i, Owner: owner, Lock: "s", Kind: opAcquire, Result: resOK, Fence: int64(10 + i), Limit: 3, Call: ms(i), Return: ms(i + 1)},
				histOp{Client: i, Owner: owner, Lock: "s", Kind: opRelease, Result: resOK, Fence: int64(10 + i), Call: ms(20), Return: ms(21), Told: ms(20)})
		}
		return ops
	}
	st := &store{fenced: true, locks: map[string]*storeLock{}}
	if o := analyze("three of three", hist(3), st); o.overlaps != 0 || o.concurrency["s"] != 3 {
		t.Errorf("three holders of a semaphore of 3: %d overlaps, at most %d at once", o.overlaps, o.concurrency["s"])
	}
	if o := analyze("four of three", hist(4), st); o.overlaps == 0 || o.concurrency["s"] != 4 {
		t.Errorf("four holders of a semaphore of 3: %d overlaps, at most %d at once", o.overlaps, o.concurrency["s"])
	}
}

// TestCheckersCountReadersAndWriters: readers of a read/write lock overlap,
// a writer with anyone is a belief overlap.
func TestCheckersCountReadersAndWriters(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	hist := func(modes ...string) []histOp {
		var ops []histOp
		for i, m := range modes {
			owner := string(rune('a' + i))
			ops = append(ops,
				histOp{Client: i, Owner: owner, Lock: "rw", Kind: opAcquire, Result: resOK, Fence: int64(10 + i), Mode: m, Call: ms(i), Return: ms(i + 1)},
				histOp{Client: i, Owner: owner, Lock: "rw", Kind: opRelease, Result: resOK, Fence: int64(10 + i), Call: ms(20), Return: ms(21), Told: ms(20)})
		}
		return ops
	}
	st := &store{fenced: true, locks: map[string]*storeLock{}}
	if o := analyze("readers", hist("read", "read", "read"), st); o.overlaps != 0 || o.concurrency["rw"] != 3 {
		t.Errorf("three readers: %d overlaps, at most %d at once", o.overlaps, o.concurrency["rw"])
	}
	if o := analyze("a writer among readers", hist("read", "", "read"), st); o.overlaps == 0 {
		t.Error("a writer among readers: no belief overlap counted")
	}
}
