#!/usr/bin/env bash
# Hold a Baton lock while a phase runs, with curl alone. The lock is held as
# long as curl's connection stays open; a second caller gets 409 and the
# running execution's id: the webhook pattern.
set -euo pipefail
sock=${BATON_SOCKET:-/var/run/baton/baton.sock}
key=nightly/report owner=exec-sh
if [ ! -S "$sock" ]; then
  echo "baton: no sidecar socket at $sock (set BATON_SOCKET)" >&2
  exit 1
fi

events=$(mktemp -u) && mkfifo "$events" && trap 'rm -f "$events"' EXIT
curl -sN --unix-socket "$sock" -X POST "http://baton/v1/locks/$key:hold" \
  -d "{\"owner\":\"$owner\",\"ttl\":\"10m\"}" >"$events" &
curl_pid=$!
exec 3<"$events"
read -r event <&3
case "$event" in
*'"event":"granted"'*)
  fence=$(sed 's/.*"fence":\([0-9]*\).*/\1/' <<<"$event")
  echo "running $key with fence $fence" # pass the fence to what you write
  kill "$curl_pid"                      # closing the connection releases the lock
  wait "$curl_pid" || true
  echo released
  ;;
*'"code":"already_running"'*) # webhook pattern: 409 with the running execution's id
  running=$(sed 's/.*"holder":{"owner":"\([^"]*\)".*/\1/' <<<"$event")
  echo "409 {\"error\":\"already running\",\"running_execution_id\":\"$running\"}"
  ;;
*)
  echo "baton: $event" >&2
  exit 1
  ;;
esac
