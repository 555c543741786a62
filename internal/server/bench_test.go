package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// BenchmarkRefusal measures a try of a lock held by another sidecar, the
// path a burst of duplicate webhooks takes: the client, the socket API and
// a linearizable read shared by concurrent callers, all in this process.
// make bench measures it against etcd's Mutex; this is for pprof and
// -benchmem.
func BenchmarkRefusal(b *testing.B) {
	holder, refuser := newAPI(b, "holder"), newAPI(b, "refuser")
	if r, err := holder.try(http.MethodPost, "/v1/locks/held", `{"owner":"h","ttl":"1h"}`); err != nil || r.status != http.StatusOK {
		b.Fatalf("hold: %v %+v", err, r)
	}
	b.SetParallelism(8)
	b.ReportAllocs()
	reads := refuser.calls.Ranges()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := refuser.client.Post("http://baton/v1/locks/held", "application/json", strings.NewReader(`{"owner":"r"}`))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusConflict {
				b.Errorf("status %d, want 409", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(refuser.calls.Ranges()-reads)/float64(b.N), "reads/op")
}

// BenchmarkCycle measures acquire + release of a free lock, each
// goroutine its own, through the socket API: the path of make bench's
// cycles, in this process, for pprof and -benchmem.
func BenchmarkCycle(b *testing.B) {
	api := newAPI(b, "cycler")
	b.SetParallelism(8)
	b.ReportAllocs()
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		k := fmt.Sprintf("/v1/locks/cycle-%d", next.Add(1))
		for pb.Next() {
			if r, err := api.try(http.MethodPost, k, `{"owner":"me","ttl":"1m"}`); err != nil || r.status != http.StatusOK {
				b.Errorf("acquire: %v %+v", err, r)
				return
			}
			if r, err := api.try(http.MethodDelete, k+"?owner=me", ""); err != nil || r.status != http.StatusOK {
				b.Errorf("release: %v %+v", err, r)
				return
			}
		}
	})
}
