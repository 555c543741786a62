#!/bin/sh
# postgres-write.sh FENCE BODY: run postgres-write.sql with psql (the server
# from PGHOST, PGUSER, PGDATABASE). Exits 1 when no row was written: a
# holder with a higher fence wrote the report since.
set -eu
written=$(psql -X -q -A -t -v ON_ERROR_STOP=1 -v id=daily -v fence="$1" -v body="$2" -f "$(dirname "$0")/postgres-write.sql")
if [ -z "$written" ]; then
  echo "refused: a holder with a fence above $1 wrote the report" >&2
  exit 1
fi
echo "written with fence $written"
