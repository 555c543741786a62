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
	// keepAliveStartedMetric counts the lease keep-alive streams etcd has
	// opened; less those handled, the streams open now.
	keepAliveStartedMetric = `grpc_server_started_total{grpc_method="LeaseKeepAlive",grpc_service="etcdserverpb.Lease",grpc_type="bidi_stream"}`
)

// Gauges of etcd's.
const (
	// watchStreamsMetric is the watch streams etcd serves.
	watchStreamsMetric = "etcd_debugging_mvcc_watch_stream_total"
	// watchersMetric is the watches on those streams.
	watchersMetric = "etcd_debugging_mvcc_watcher_total"
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
	for _, line := range w.scrape(ctx) {
		for i, name := range names {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					vals[i] = f
				}
			}
		}
	}
	return vals
}

// metricSum returns the sum of etcd's series that start with prefix and
// contain every one of labels.
func (w *world) metricSum(ctx context.Context, prefix string, labels ...string) float64 {
	sum := 0.0
	for _, line := range w.scrape(ctx) {
		series, v, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(series, prefix) {
			continue
		}
		all := true
		for _, l := range labels {
			all = all && strings.Contains(series, l)
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && all {
			sum += f
		}
	}
	return sum
}

// scrape reads etcd's /metrics on its unix socket; nil when it cannot.
func (w *world) scrape(ctx context.Context) []string {
	if w.etcdHTTP == nil {
		sock := strings.TrimPrefix(w.etcd.endpoint, "unix://")
		w.etcdHTTP = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://etcd/metrics", nil)
	if err != nil {
		return nil
	}
	resp, err := w.etcdHTTP.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}
