// Package etcdtest starts a real embedded etcd for tests: a unix-socket
// client URL in a short temporary directory, fsync off.
package etcdtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/baton-dev/baton/internal/embedetcd"
)

// Server is an embedded etcd that can be stopped and started again on the
// same data directory.
type Server struct {
	Dir string
	cfg embedetcd.Config
	e   *embedetcd.Etcd

	// lazy is set by Main: the member starts when a test first uses it
	// (once, under started).
	lazy    bool
	started sync.Once
}

// Start starts an etcd in a new temporary directory. Call Close when done.
func Start() (*Server, error) { return StartWith(func(*embedetcd.Config) {}) }

// StartWith is Start with the configuration changed by mod: a small space
// quota, a short history.
func StartWith(mod func(*embedetcd.Config)) (*Server, error) {
	s, err := prepare(mod)
	if err != nil {
		return nil, err
	}
	if err := s.Restart(); err != nil {
		os.RemoveAll(s.Dir)
		return nil, err
	}
	return s, nil
}

// prepare makes a Server's directory and configuration, not started.
func prepare(mod func(*embedetcd.Config)) (*Server, error) {
	dir, err := os.MkdirTemp("", "baton-etcd")
	if err != nil {
		return nil, err
	}
	cfg := embedetcd.Default(filepath.Join(dir, "data"))
	cfg.ClientURL = "unix://" + filepath.Join(dir, "client.sock")
	cfg.UnsafeNoFsync = true
	mod(&cfg)
	return &Server{Dir: dir, cfg: cfg}, nil
}

// ensure starts the member of Main the first time a test uses it. A
// member started before the tests would race with testing itself under
// go test -json: testing's M.Run then sets os.Stderr, which etcd's
// serving goroutines read as they start.
func (s *Server) ensure() {
	s.started.Do(func() {
		if s.lazy && s.e == nil {
			if err := s.start(); err != nil {
				panic("start etcd: " + err.Error())
			}
		}
	})
}

// Endpoints returns the client endpoints.
func (s *Server) Endpoints() []string {
	s.ensure()
	return []string{s.cfg.ClientURL}
}

// Stop stops the member, keeping its data.
func (s *Server) Stop() {
	s.ensure()
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}

// Restart starts the member again on its data directory.
func (s *Server) Restart() error {
	s.started.Do(func() {}) // started here, not by ensure
	return s.start()
}

func (s *Server) start() error {
	e, err := embedetcd.Start(context.Background(), s.cfg)
	if err != nil {
		return err
	}
	s.e = e
	return nil
}

// Close stops the member and removes its directory.
func (s *Server) Close() {
	s.started.Do(func() {}) // not started now if it never was
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
	os.RemoveAll(s.Dir)
}

// Counter counts the unary gRPC calls of a client by method.
type Counter struct{ txn, txnDone, rng, put, del atomic.Int64 }

// Txns returns the number of Txn calls so far.
func (c *Counter) Txns() int64 { return c.txn.Load() }

// TxnsDone returns the number of Txn calls that etcd answered without an
// error.
func (c *Counter) TxnsDone() int64 { return c.txnDone.Load() }

// Ranges returns the number of Range (Get) calls so far.
func (c *Counter) Ranges() int64 { return c.rng.Load() }

// Puts returns the number of Put calls so far.
func (c *Counter) Puts() int64 { return c.put.Load() }

// Deletes returns the number of DeleteRange calls so far.
func (c *Counter) Deletes() int64 { return c.del.Load() }

func (c *Counter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch method {
	case "/etcdserverpb.KV/Txn":
		c.txn.Add(1)
	case "/etcdserverpb.KV/Range":
		c.rng.Add(1)
	case "/etcdserverpb.KV/Put":
		c.put.Add(1)
	case "/etcdserverpb.KV/DeleteRange":
		c.del.Add(1)
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err == nil && method == "/etcdserverpb.KV/Txn" {
		c.txnDone.Add(1)
	}
	return err
}

// Forward serves s on l, a byte-for-byte forwarder per connection, until l
// is closed: an etcd that comes up at an address of the test's choosing.
// With send, what a client sends is copied to etcd by send(etcd, client)
// (which may read it on the way: its HTTP/2 frames, say) instead of
// io.Copy.
func (s *Server) Forward(l net.Listener, send func(to io.Writer, from io.Reader)) {
	network, target, _ := strings.Cut(s.Endpoints()[0], "://")
	if network == "http" {
		network = "tcp"
	}
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial(network, target)
			if err != nil {
				in.Close()
				continue
			}
			go func() {
				if send != nil {
					send(out, in)
				} else {
					_, _ = io.Copy(out, in) // a broken connection just ends
				}
				out.Close()
			}()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
}

// Client returns a client of s closed at the end of the test, and a
// counter of its calls; opts are dial options beside the counter's.
func (s *Server) Client(t testing.TB, opts ...grpc.DialOption) (*clientv3.Client, *Counter) {
	t.Helper()
	var c Counter
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   s.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: append([]grpc.DialOption{grpc.WithChainUnaryInterceptor(c.intercept)}, opts...),
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, &c
}

// Main runs a package's tests with one etcd, passed to set, and fails them
// when a goroutine of Baton's own packages outlives the tests.
//
// The etcd starts when a test first uses it, once the tests run.
func Main(m *testing.M, set func(*Server)) int {
	s, err := prepare(func(*embedetcd.Config) {})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start etcd:", err)
		return 1
	}
	s.lazy = true
	defer s.Close()
	set(s)
	return MainWithoutEtcd(m)
}

// MainWithoutEtcd runs a package's tests, which need no etcd (they run on
// an in-memory store), and fails them as Main does when a goroutine of
// Baton's own packages outlives them.
func MainWithoutEtcd(m *testing.M) int {
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintln(os.Stderr, "goroutines leaked by the tests:\n"+leaked)
			return 1
		}
	}
	return code
}

// leakedGoroutines waits up to d for every goroutine running Baton's code
// (other than this package's) to end, and returns the stacks of the rest.
func leakedGoroutines(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<22)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "github.com/baton-dev/baton/") && !strings.Contains(g, "baton/internal/testing/etcdtest.") &&
				!strings.Contains(g, "testing.(*M).Run") && !strings.Contains(g, "runtime.Stack") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FreeURL is an http URL on a port of the loopback free when asked: for
// an etcd member a test starts itself.
func FreeURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}
