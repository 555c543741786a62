package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore/etcdstore"
)

// bareChildEnv holds "socket|etcd endpoint[|shaped]" for a re-executed
// bench binary that runs the bare sidecar instead of the bench; shaped
// makes its transactions Baton's (batonTry).
const bareChildEnv = "BATON_BENCH_BARE"

// runBareChild runs the least a sidecar can be: an HTTP server on a unix
// socket that turns each acquire into one raw etcd Txn and each release
// into another, under one lease, with a JSON body in and out. No queue, no
// watch, no state, no logs, no metrics; one CPU for its Go code and the
// etcd client's transport settings, like Baton's. Its cycle is the floor of
// any design that puts a process between the app and etcd.
func runBareChild(spec string) int {
	parts := strings.Split(spec, "|")
	if len(parts) < 2 || len(parts) > 3 || (len(parts) == 3 && parts[2] != "shaped") {
		fmt.Fprintf(os.Stderr, "%s=%q: want socket|endpoint or socket|endpoint|shaped\n", bareChildEnv, spec)
		return 2
	}
	socket, endpoint, shaped := parts[0], parts[1], len(parts) == 3
	layout, err := keyspace.NewLayout("bench-bare")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// key is the lock name's key: a plain one, or (shaped) Baton's
	// contender key under lease l.
	key := func(name string, l clientv3.LeaseID) (string, error) {
		if !shaped {
			return "/bench/bare/" + name, nil
		}
		k, err := keyspace.ParseKey(name)
		if err != nil {
			return "", err
		}
		return layout.ContenderKey(k, int64(l)), nil
	}
	// try is the Txn that takes the lock name: a put if the key is free,
	// or (shaped) Baton's try.
	try := func(txn clientv3.Txn, name, owner string, l clientv3.LeaseID) (clientv3.Txn, error) {
		if shaped {
			k, err := keyspace.ParseKey(name)
			if err != nil {
				return nil, err
			}
			txn, _ = batonTry(txn, layout, k, owner, l)
			return txn, nil
		}
		k, _ := key(name, l) // a plain key is any name
		return txn.If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, owner, clientv3.WithLease(l))), nil
	}
	// The etcd client's transport is Baton's: what it saves is not Baton's
	// design but gRPC's settings, which any sidecar can have.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: etcdstore.DialOptions()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cli.Close()
	l, err := cli.Grant(context.Background(), 60)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ka, err := cli.KeepAlive(context.Background(), l.ID)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		for range ka {
		}
	}()
	ln, err := net.Listen("unix", socket)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := &http.Server{Handler: bareMux(cli, l.ID, key, try)}
	go srv.Serve(ln)
	readyUntilSignal("serving on " + socket)
	srv.Close()
	cli.Revoke(context.Background(), l.ID)
	return 0
}

// bareMux serves the bare sidecar's two calls under lease l: key names a
// lock's key, try builds the transaction that takes it.
func bareMux(cli *clientv3.Client, l clientv3.LeaseID, key func(string, clientv3.LeaseID) (string, error),
	try func(clientv3.Txn, string, string, clientv3.LeaseID) (clientv3.Txn, error)) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /k/{name}", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Owner string `json:"owner"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// As in Baton, the outcome must not depend on the caller hanging
		// up mid-call: a put committed for a gone caller would stay.
		txn, err := try(cli.Txn(context.WithoutCancel(r.Context())), r.PathValue("name"), body.Owner, l)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := txn.Commit()
		if err != nil {
			answerTxn(w, nil, err, "", nil)
			return
		}
		answerTxn(w, resp, nil, "held", map[string]any{"owner": body.Owner, "fence": resp.Header.Revision})
	})
	mux.HandleFunc("DELETE /k/{name}", func(w http.ResponseWriter, r *http.Request) {
		fence, err := strconv.ParseInt(r.URL.Query().Get("fence"), 10, 64)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		k, err := key(r.PathValue("name"), l)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := cli.Txn(context.WithoutCancel(r.Context())).If(clientv3.Compare(clientv3.CreateRevision(k), "=", fence)).
			Then(clientv3.OpDelete(k)).Commit()
		answerTxn(w, resp, err, "not held", map[string]any{"fence": fence})
	})
	return mux
}

// startBare starts the bare sidecar on the bench's etcd; shaped, with
// Baton's transactions.
func (w *world) startBare(shaped bool) (*sidecar, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	name, spec := "bare", w.etcd.endpoint
	if shaped {
		name, spec = "bare-shaped", spec+"|shaped"
	}
	socket := filepath.Join(w.dir, name+".sock")
	cmd := exec.Command(self)
	// On one CPU, as Baton's sidecar runs by default (--max-procs).
	cmd.Env = append(os.Environ(), bareChildEnv+"="+socket+"|"+spec, "GOMAXPROCS=1")
	p, err := startProc(cmd, "serving on")
	if err != nil {
		return nil, err
	}
	s := newSidecar(p, socket)
	w.sidecars = append(w.sidecars, s)
	return s, nil
}

// bare takes and releases the lock through the bare sidecar s, reported
// as name.
func (w *world) bare(s *sidecar, name string) contender {
	return contender{name: name, setup: func(ctx context.Context, c int) (func(context.Context, int) error, func(), error) {
		return func(ctx context.Context, i int) error {
			var got struct {
				Fence int64 `json:"fence"`
			}
			// Not cut short at the run's end: a grant whose answer is lost
			// would keep the key (Baton's grants are idempotent per owner,
			// so the next round's first try gets it back; this one has no
			// memory).
			if err := s.callJSON(context.WithoutCancel(ctx), "POST", fmt.Sprintf("/k/k%d", i), fmt.Sprintf(`{"owner":"c%d"}`, i), &got); err != nil {
				return err
			}
			return s.call(context.WithoutCancel(ctx), "DELETE", fmt.Sprintf("/k/k%d?fence=%d", i, got.Fence), "", 200)
		}, func() {}, nil
	}}
}

// answerTxn answers a transaction's outcome: 503 when it failed, 409 with
// conflict when its compare failed, else v as JSON.
func answerTxn(w http.ResponseWriter, resp *clientv3.TxnResponse, err error, conflict string, v any) {
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	case !resp.Succeeded:
		http.Error(w, conflict, http.StatusConflict)
	default:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
}
