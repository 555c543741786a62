package lease

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

var testEtcd *etcdtest.Server

func TestMain(m *testing.M) {
	os.Exit(etcdtest.Main(m, func(s *etcdtest.Server) { testEtcd = s }))
}

func testConfig() Config {
	c := Default()
	c.TTL, c.GrantTimeout, c.RetryMin, c.RetryMax = 2*time.Second, time.Second, 20*time.Millisecond, 100*time.Millisecond
	return c
}

func TestValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Config){
		"TTL below minimum":     func(c *Config) { c.TTL = time.Second },
		"grant timeout too big": func(c *Config) { c.GrantTimeout = c.TTL },
		"no back-off":           func(c *Config) { c.RetryMin = 0 },
		"max below min":         func(c *Config) { c.RetryMax = c.RetryMin / 2 },
		"no keys per lease":     func(c *Config) { c.KeysPerLease = 0 },
		"no leases":             func(c *Config) { c.MaxLeases = 0 },
	} {
		c := Default()
		mod(&c)
		if c.Validate() == nil {
			t.Errorf("%s: Validate() = nil", name)
		}
	}
	if got := TTLSeconds(2500 * time.Millisecond); got != 3 {
		t.Errorf("TTLSeconds(2.5s) = %d, want 3 (round up)", got)
	}
}

// TestKeeper: one session at a time; a lost session is replaced by a new
// one; Close revokes the lease and stops.
func TestKeeper(t *testing.T) {
	cli, _ := testEtcd.Client(t)
	k, err := NewKeeper(cli, testConfig(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Current(); !errors.Is(err, ErrNoSession) {
		t.Fatalf("Current before Run: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { k.Run(ctx); close(done) }()

	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	s1, err := k.Wait(wctx)
	if err != nil {
		t.Fatal(err)
	}
	if s1.TTL() != 2*time.Second {
		t.Errorf("TTL %v", s1.TTL())
	}
	// Lose the lease behind the keeper's back.
	if _, err := cli.Revoke(ctx, s1.ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s1.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after the lease was revoked")
	}
	var s2 *Session
	deadline := time.Now().Add(10 * time.Second)
	for {
		if s2, err = k.Current(); err == nil && s2.ID() != s1.ID() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no new session after the loss")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := k.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ttl, err := cli.TimeToLive(ctx, s2.ID())
	if err != nil || ttl.TTL != -1 {
		t.Errorf("lease after Close: TTL %v, %v; want revoked (-1)", ttl.TTL, err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after Close")
	}
	if _, err := k.Current(); !errors.Is(err, ErrNoSession) {
		t.Errorf("Current after Close: %v", err)
	}
	short, scancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer scancel()
	if _, err := k.Wait(short); !errors.Is(err, ErrNoSession) {
		t.Errorf("Wait after Close: %v", err)
	}
}
