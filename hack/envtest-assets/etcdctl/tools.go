//go:build tools

// Package tools pins etcdctl, which the test etcd image carries as the
// official one does (make image builds it into bin/k8s).
package tools

import _ "go.etcd.io/etcd/etcdctl/v3"
