package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// The etcd metrics the bench reads: counters, so a run's figure is the
// difference between two reads.
const (
	// watchEventsMetric counts the watch events etcd has sent to its watchers.
	watchEventsMetric = "etcd_debugging_mvcc_events_total"
	// rangesMetric counts the reads (Range calls) etcd has served.
	rangesMetric = `grpc_server_handled_total{grpc_code="OK",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"}`
	// txnsMetric counts the transactions (Txn calls) etcd has served.
	txnsMetric = `grpc_server_handled_total{grpc_code="OK",grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"}`
)

// metric returns the value of one of etcd's metrics; -1 when it cannot be
// read.
func (w *world) metric(ctx context.Context, name string) float64 {
	return w.metrics(ctx, name)[0]
}

// metrics returns the values of etcd's metrics names, read from its
// /metrics on its unix socket; -1 for each that cannot be read.
func (w *world) metrics(ctx context.Context, names ...string) []float64 {
	vals := make([]float64, len(names))
	for i := range vals {
		vals[i] = -1
	}
	if w.etcdHTTP == nil {
		sock := strings.TrimPrefix(w.etcd.endpoint, "unix://")
		w.etcdHTTP = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://etcd/metrics", nil)
	if err != nil {
		return vals
	}
	resp, err := w.etcdHTTP.Do(req)
	if err != nil {
		return vals
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		for i, name := range names {
			if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					vals[i] = f
				}
			}
		}
	}
	return vals
}
