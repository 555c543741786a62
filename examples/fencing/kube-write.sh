#!/bin/sh
# kube-write.sh FENCE BODY: write BODY (one line) into the ConfigMap report
# with the holder's fence in its baton.dev/fence annotation. With
# fence-policy.yaml applied, the API server refuses it when a holder with a
# higher fence wrote it since, and kubectl exits 1 saying "fence N is
# below M". Create the ConfigMap once, before the first write:
#   kubectl create configmap report --from-literal=body=
#   kubectl annotate configmap report baton.dev/fence=0
set -eu
case $1 in '' | *[!0-9]*) echo "FENCE must be a number: $1" >&2; exit 2 ;; esac
case $2 in *'
'*) echo "BODY must be one line" >&2; exit 2 ;; esac
# A JSON string: escape \ and ".
body=$(printf '%s\n' "$2" | sed 's/\\/\\\\/g; s/"/\\"/g')
kubectl patch configmap report --type merge \
  -p "{\"metadata\":{\"annotations\":{\"baton.dev/fence\":\"$1\"}},\"data\":{\"body\":\"$body\"}}"
