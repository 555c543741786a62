#!/bin/sh
# etcd-write.sh FENCE BODY: write BODY (one line) to /app/report with the
# holder's fence, in one etcd transaction that compares the fence of the
# last write (kept in /app/report/fence) with this holder's. etcd compares
# values as strings, so fences are written as 20 digits; "not above FENCE"
# is "below FENCE + 1". Exits 1, writing nothing, when a holder with a
# higher fence wrote since. Create the fence key once, before the first
# write:
#   etcdctl put /app/report/fence 00000000000000000000
set -eu
case $1 in '' | *[!0-9]*) echo "FENCE must be a number: $1" >&2; exit 2 ;; esac
case $2 in *'
'*) echo "BODY must be one line" >&2; exit 2 ;; esac
fence=$(printf '%020d' "$1")
next=$(printf '%020d' "$(($1 + 1))")
# etcdctl reads a transaction's values as Go strings: escape \ and ".
body=$(printf '%s\n' "$2" | sed 's/\\/\\\\/g; s/"/\\"/g')
out=$(etcdctl txn <<TXN
value("/app/report/fence") < "$next"

put /app/report/fence "$fence"
put /app/report "$body"


TXN
)
case $out in
SUCCESS*) echo "written with fence $1" ;;
*) echo "refused: a holder with a fence above $1 wrote /app/report" >&2; exit 1 ;;
esac
