//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestSoakMillionCycles (BATON_SOAK=1 only): one million acquire+release
// cycles on a sidecar's embedded etcd, 32 callers at once, with a history
// of 15 s. etcd compacts, once each history, the revisions older than it,
// so what is in use stays within two histories' worth (about 500 bytes a
// cycle: at 1,900 cycles a second, about 28 MiB; the default 5m keeps
// twenty times that) and the file no larger, where without compaction the
// million cycles' history alone would be about 500 MB. Once the run has
// been over for two histories, about nothing is in use.
func TestSoakMillionCycles(t *testing.T) {
	if !soak {
		t.Skip("soak only: BATON_SOAK=1 (make soak)")
	}
	const (
		cycles  = 1_000_000
		callers = 32
		history = 15 * time.Second
		// The file's bound, which docs/operations.md states; what is in use
		// is bounded by the run's rate too, below.
		maxFile, idleInUse = 64 << 20, 4 << 20
	)
	dir := shortDir(t)
	sock, etcdURL := filepath.Join(dir, "b.sock"), "unix://"+filepath.Join(dir, "etcd.sock")
	var stderr lockedBuffer
	cmd := exec.Command(batonBin, "serve", "--socket", sock, "--data-dir", filepath.Join(dir, "data"),
		"--embedded-client-url", etcdURL, "--embedded-history", history.String(), "--health-addr", "", "--log-level", "warn")
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make([]byte, 4096)
	if n, err := stdout.Read(line); err != nil || !strings.Contains(string(line[:n]), "serving on") {
		t.Fatalf("no ready line: %q %v; stderr: %s", line[:n], err, stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: callers, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second})
	must(t, err)
	t.Cleanup(func() { cli.Close() })
	status := func() (size, inUse, rev int64) {
		st, err := cli.Status(context.Background(), etcdURL)
		must(t, err)
		return st.DbSize, st.DbSizeInUse, st.Header.Revision
	}

	var done, failed atomic.Int64
	var peakSize, peakInUse atomic.Int64
	start := time.Now()
	stopWatch := make(chan struct{})
	go func() { // the file's and the data's peaks, every second
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(time.Second):
			}
			if st, err := cli.Status(context.Background(), etcdURL); err == nil {
				peakSize.Store(max(peakSize.Load(), st.DbSize))
				peakInUse.Store(max(peakInUse.Load(), st.DbSizeInUse))
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			key, owner := fmt.Sprintf("soak/cycle-%d", w), fmt.Sprintf("caller-%d", w)
			body := []byte(`{"owner":"` + owner + `","ttl":"1m"}`)
			for done.Add(1) <= cycles {
				if !cycleCall(hc, http.MethodPost, "/v1/locks/"+key, body) || !cycleCall(hc, http.MethodDelete, "/v1/locks/"+key+"?owner="+owner, nil) {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(stopWatch)
	endSize, endInUse, rev := status()
	// Past a history or so, compaction takes the rest.
	var size, inUse int64
	idleStart := time.Now()
	for deadline := time.Now().Add(4 * history); ; time.Sleep(time.Second) {
		size, inUse, _ = status()
		if inUse < idleInUse || time.Now().After(deadline) {
			break
		}
	}
	idle := time.Since(idleStart)
	t.Logf("%d cycles in %v (%.0f a second, %d failed), etcd revision %d; peak file %.1f MiB, in use %.1f MiB; "+
		"at the end %.1f MiB, %.1f in use; %v later %.1f MiB, %.1f in use",
		cycles, took.Round(time.Second), float64(cycles)/took.Seconds(), failed.Load(), rev,
		mib(peakSize.Load()), mib(peakInUse.Load()), mib(endSize), mib(endInUse), idle.Round(time.Second), mib(size), mib(inUse))
	if failed.Load() != 0 {
		t.Errorf("%d cycles failed; stderr: %s", failed.Load(), stderr.String())
	}
	// Two histories at the run's rate, 640 bytes a cycle (500 measured),
	// and the keys and leases of the sidecar.
	rate := float64(cycles) / took.Seconds()
	maxInUse := int64(2*history.Seconds()*rate*640) + 8<<20
	if peak := max(peakInUse.Load(), endInUse); peak > maxInUse {
		t.Errorf("etcd's database held %.1f MiB in use, past two histories' worth at %.0f cycles a second (%.1f MiB)", mib(peak), rate, mib(maxInUse))
	}
	if peak := max(peakSize.Load(), endSize, size); peak > maxFile {
		t.Errorf("etcd's file grew to %.1f MiB, past %d MiB", mib(peak), maxFile>>20)
	}
	if inUse >= idleInUse {
		t.Errorf("%.1f MiB still in use %v after the run: compaction did not take the history", mib(inUse), idle.Round(time.Second))
	}
	report.add(&outcome{name: "soak: a million acquire+release cycles on the embedded etcd", ok: cycles - int(failed.Load()), attempts: cycles,
		notes: []string{fmt.Sprintf("%.0f cycles a second, %d callers, history %v; etcd's file peaked at %.1f MiB (%.1f in use), %.1f MiB (%.1f in use) %v after the run",
			float64(cycles)/took.Seconds(), callers, history, mib(peakSize.Load()), mib(peakInUse.Load()), mib(size), mib(inUse), idle.Round(time.Second))}})
}

// cycleCall makes one request and reports whether it answered 200.
func cycleCall(hc *http.Client, method, path string, body []byte) bool {
	req, err := http.NewRequest(method, "http://baton"+path, bytes.NewReader(body))
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
