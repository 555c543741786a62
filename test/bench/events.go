package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// watchEventsMetric counts the watch events etcd has sent to its watchers.
const watchEventsMetric = "etcd_debugging_mvcc_events_total"

// rangesMetric counts the reads (Range calls) etcd has served.
const rangesMetric = `grpc_server_handled_total{grpc_code="OK",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"}`

// watchEvents returns the watch events etcd has sent so far; -1 when they
// cannot be read.
func (w *world) watchEvents(ctx context.Context) float64 { return w.metric(ctx, watchEventsMetric) }

// metric returns the value of one of etcd's metrics, read from its
// /metrics on its unix socket; -1 when it cannot be read.
func (w *world) metric(ctx context.Context, name string) float64 {
	if w.etcdHTTP == nil {
		sock := strings.TrimPrefix(w.etcd.endpoint, "unix://")
		w.etcdHTTP = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://etcd/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := w.etcdHTTP.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return -1
			}
			return f
		}
	}
	return -1
}
