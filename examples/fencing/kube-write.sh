#!/bin/sh
# kube-write.sh FENCE BODY: write BODY into the ConfigMap report with the
# holder's fence in its baton.dev/fence annotation. With fence-policy.yaml
# applied, the API server refuses it when a holder with a higher fence
# wrote it since, and kubectl exits 1.
set -eu
kubectl patch configmap report --type merge \
  -p "{\"metadata\":{\"annotations\":{\"baton.dev/fence\":\"$1\"}},\"data\":{\"body\":\"$2\"}}"
