#!/bin/sh
# etcd-write.sh FENCE BODY: write BODY to /app/report with the holder's
# fence, in one etcd transaction that compares the fence of the last write
# (kept in /app/report/fence) with this holder's. etcd compares values as
# strings, so fences are written as 20 digits; "not above FENCE" is
# "below FENCE + 1". Exits 1, writing nothing, when a holder with a higher
# fence wrote since. Create the fence key once, before the first write:
#   etcdctl put /app/report/fence 00000000000000000000
set -eu
fence=$(printf '%020d' "$1")
next=$(printf '%020d' "$(($1 + 1))")
out=$(etcdctl txn <<TXN
value("/app/report/fence") < "$next"

put /app/report/fence "$fence"
put /app/report "$2"


TXN
)
case $out in
SUCCESS*) echo "written with fence $1" ;;
*) echo "refused: a holder with a fence above $1 wrote /app/report" >&2; exit 1 ;;
esac
