package coordinator

import (
	"context"
	"errors"
	"go/ast"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// TestClockMovesTheEngine: with a fake clock, the engine's times and
// timers follow it and nothing else: a grant is stamped with the clock's
// time, a Hold renews when the clock says a third of its window passed,
// and a lock expires when the clock passes its deadline, not before.
func TestClockMovesTheEngine(t *testing.T) {
	parallel(t)
	start := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	fc := clockwork.NewFakeClockAt(start)
	s := newSidecarWith(t, newWorld(t), "pod-a", []Option{WithClock(fc)}, func(c *Config) { c.WatchDelay = 0 })
	ctx := context.Background()

	g, err := s.c.Acquire(ctx, AcquireRequest{Key: key(t, "clocked"), Owner: "job-1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !g.AcquiredAt.Equal(start) || !g.ExpiresAt.Equal(start.Add(time.Minute)) {
		t.Fatalf("granted at %v until %v; the clock says %v until %v", g.AcquiredAt, g.ExpiresAt, start, start.Add(time.Minute))
	}

	hg, err := s.c.Acquire(ctx, AcquireRequest{Key: key(t, "kept"), Owner: "job-2", TTL: 30 * time.Second, Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hold := s.c.Keep(hctx, hg)

	// Real time passing moves nothing.
	time.Sleep(100 * time.Millisecond)
	if g.ExpiresAt != start.Add(time.Minute) || hold.Grant().ExpiresAt != start.Add(30*time.Second) {
		t.Fatalf("deadlines moved with no clock advance: %v, %v", g.ExpiresAt, hold.Grant().ExpiresAt)
	}
	select {
	case <-g.Done():
		t.Fatalf("lock ended with no clock advance: %v", g.Err())
	default:
	}

	// A third of the hold's window: it renews, to the clock's now + 30s.
	fc.Advance(11 * time.Second)
	waitFor(t, 10*time.Second, "the hold renewed on the clock", func() bool {
		return hold.Grant().ExpiresAt.Equal(start.Add(41 * time.Second))
	})
	hold.Release("done")
	select {
	case <-hold.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the hold did not end once released")
	}
	if err := hold.Err(); err != nil {
		t.Fatalf("the renewed hold: %v", err)
	}

	// Just short of the deadline: held.
	fc.Advance(48 * time.Second)
	time.Sleep(50 * time.Millisecond)
	select {
	case <-g.Done():
		t.Fatalf("lock ended before its deadline on the clock: %v", g.Err())
	default:
	}
	// Past it: expired, at the clock's time.
	fc.Advance(2 * time.Second)
	select {
	case <-g.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("lock still held 1s past its deadline on the clock")
	}
	var lost *LostError
	if !errors.As(g.Err(), &lost) || lost.Reason != Expired || !lost.At.Equal(start.Add(61*time.Second)) {
		t.Fatalf("lock ended with %v; want expired at %v", g.Err(), start.Add(61*time.Second))
	}
}

// TestOneClock: the engine reads the time and sets its timers only on its
// clock (WithClock); a call of the time package's clock would go unmoved
// by a test's fake clock.
func TestOneClock(t *testing.T) {
	parallel(t)
	wall := map[string]bool{"Now": true, "Since": true, "Until": true, "After": true, "AfterFunc": true, "NewTimer": true, "NewTicker": true, "Tick": true, "Sleep": true}
	fs, files := productFiles(t, ".")
	for _, af := range files {
		ast.Inspect(af, func(n ast.Node) bool {
			se, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := se.X.(*ast.Ident); ok && id.Name == "time" && wall[se.Sel.Name] {
				t.Errorf("%s: time.%s: read the time and set timers on the coordinator's clock", fs.Position(se.Pos()), se.Sel.Name)
			}
			return true
		})
	}
	if len(files) < 10 {
		t.Fatalf("checked %d files; the package has more", len(files))
	}
}
