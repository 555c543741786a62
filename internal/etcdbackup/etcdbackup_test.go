package etcdbackup

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

var srv *etcdtest.Server

func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m, func(s *etcdtest.Server) { srv = s })) }

// TestTakeNamesAndKeeps: each snapshot is named by when it was taken and
// the revision it holds (etcd's revision when it was taken), the oldest
// beyond Keep are deleted, and what a killed Take left is cleaned up.
func TestTakeNamesAndKeeps(t *testing.T) {
	cli, _ := srv.Client(t)
	ctx := context.Background()
	cfg := Default()
	cfg.Dir, cfg.Keep = t.TempDir(), 2
	left := filepath.Join(cfg.Dir, partial+"20260101T000000Z.db")
	if err := os.WriteFile(left, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	var taken []Backup
	for i := range 3 {
		put, err := cli.Put(ctx, fmt.Sprintf("/backup-test/%d", i), "x")
		if err != nil {
			t.Fatal(err)
		}
		b, deleted, err := Take(ctx, cli, cfg, start.Add(time.Duration(i)*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if b.Revision != put.Header.Revision || b.Size == 0 {
			t.Errorf("snapshot %d: %+v; want revision %d and a size", i, b, put.Header.Revision)
		}
		if want := fmt.Sprintf("db-20261127T%02d0000Z-r%d.db", 10+i, put.Header.Revision); b.Name != want {
			t.Errorf("snapshot %d named %s, want %s", i, b.Name, want)
		}
		if (i == 2) != (len(deleted) == 1) {
			t.Errorf("snapshot %d deleted %v", i, deleted)
		}
		taken = append(taken, b)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("a half-written snapshot left: %v", err)
	}
	got, err := List(cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != taken[2].Name || got[1].Name != taken[1].Name {
		t.Fatalf("kept %+v; want the two newest, newest first", got)
	}
}

// TestRevisionAfterCompaction: a snapshot of an etcd whose last revisions
// were deletions compacted away still says the revision it holds.
func TestRevisionAfterCompaction(t *testing.T) {
	cli, _ := srv.Client(t)
	ctx := context.Background()
	if _, err := cli.Put(ctx, "/backup-compact", "x"); err != nil {
		t.Fatal(err)
	}
	del, err := cli.Delete(ctx, "/backup-compact")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	cfg.Dir = t.TempDir()
	b, _, err := Take(ctx, cli, cfg, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if b.Revision < del.Header.Revision {
		t.Fatalf("revision %d, want at least %d", b.Revision, del.Header.Revision)
	}
}

func TestConfigRefusesWhatCannotWork(t *testing.T) {
	for _, c := range []Config{{Keep: 1, Timeout: time.Second}, {Dir: "x", Keep: 0, Timeout: time.Second}, {Dir: "x", Keep: 1}} {
		if c.Validate() == nil {
			t.Errorf("%+v: valid", c)
		}
	}
	if _, _, err := Take(context.Background(), nil, Config{Dir: filepath.Join(t.TempDir(), "missing"), Keep: 1, Timeout: time.Second}, time.Now()); err == nil {
		t.Error("a snapshot into a missing directory: no error")
	}
}

// TestRunTakesOnSchedule: Run takes a snapshot at once into an empty
// directory and every Every after, keeping Keep, and two Takes at once
// (one asked for by hand) both write whole snapshots; a Run started again
// beside a fresh snapshot takes none before Every has passed. Its observer
// hears each snapshot, the newest kept when it starts again, and one taken
// by hand beside it.
func TestRunTakesOnSchedule(t *testing.T) {
	cli, _ := srv.Client(t)
	cfg := Default()
	cfg.Dir, cfg.Every, cfg.Keep = t.TempDir(), 300*time.Millisecond, 3
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	obs := &recorder{}
	go func() { done <- Run(ctx, cli, cfg, log, obs) }()
	byHand := make(chan error, 1)
	go func() {
		_, _, err := Take(context.Background(), cli, cfg, time.Now().Add(-time.Hour))
		byHand <- err
	}()
	if err := <-byHand; err != nil {
		t.Fatalf("a snapshot by hand beside Run: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		all, err := List(cfg.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) == 3 && all[2].Taken.After(time.Now().Add(-30*time.Minute)) {
			break // the one by hand, an hour old, was the oldest and went
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %+v; want 3 scheduled snapshots kept", all)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	before, _ := List(cfg.Dir)
	if obs.every != cfg.Every || len(obs.took) < 3 || obs.failed != 0 {
		t.Fatalf("the observer heard: every %v, took %d, failed %d; want %v, 3 or more taken, none failed", obs.every, len(obs.took), obs.failed, cfg.Every)
	}
	if newest, kept := obs.newest(); newest != before[0].Name || kept != 3 {
		t.Fatalf("the observer heard %s newest of %d kept; the newest is %s, of 3", newest, kept, before[0].Name)
	}

	// Started again, it reports what is kept, takes nothing early, and
	// finds a snapshot taken by hand.
	cfg.Every, cfg.Look = time.Hour, 50*time.Millisecond
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	obs = &recorder{}
	go func() { done <- Run(ctx, cli, cfg, log, obs) }()
	time.Sleep(300 * time.Millisecond)
	if newest, kept := obs.newest(); newest != before[0].Name || kept != 3 {
		t.Fatalf("a Run restarted told its observer %s newest of %d kept; want %s, of 3", newest, kept, before[0].Name)
	}
	b, _, err := Take(context.Background(), cli, cfg, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if newest, _ := obs.newest(); newest == b.Name {
			break
		}
		if time.Now().After(deadline) {
			newest, kept := obs.newest()
			t.Fatalf("5s after a snapshot by hand, %s, the observer's newest is %s of %d", b.Name, newest, kept)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(obs.took) != 0 {
		t.Fatalf("a Run restarted beside a fresh snapshot took %d", len(obs.took))
	}
}

// recorder is an Observer that remembers what it heard.
type recorder struct {
	mu     sync.Mutex
	every  time.Duration
	kept   []string // the newest's name each time, "" for none
	count  int      // kept, the last time
	took   []Backup
	failed int
}

// newest is the newest kept the recorder last heard of, and how many.
func (r *recorder) newest() (string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.kept) == 0 {
		return "", 0
	}
	return r.kept[len(r.kept)-1], r.count
}

func (r *recorder) Scheduled(every time.Duration) { r.mu.Lock(); r.every = every; r.mu.Unlock() }

func (r *recorder) Kept(newest *Backup, kept int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := ""
	if newest != nil {
		name = newest.Name
	}
	r.kept, r.count = append(r.kept, name), kept
}

func (r *recorder) Took(b Backup, _ time.Duration) {
	r.mu.Lock()
	r.took = append(r.took, b)
	r.mu.Unlock()
}
func (r *recorder) Failed(error) { r.mu.Lock(); r.failed++; r.mu.Unlock() }
