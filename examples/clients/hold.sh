#!/usr/bin/env bash
# Hold a Baton lock while a phase runs, with curl alone. The lock is held as
# long as curl's connection stays open; a second caller gets 409 and the
# running execution's id: the webhook pattern. Between the steps of the
# work, the stream is read: a "lost" line, its end without a last line (the
# sidecar crashed) and silence past "valid_for_seconds" (the sidecar froze)
# all mean the lock may be someone else's, and the work must stop.
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
valid_for() { sed -n 's/.*"valid_for_seconds":\([0-9.]*\).*/\1/p' <<<"$1"; }
# held: the lock is still ours if no line says otherwise before it is due
until=$(($(date +%s%N) / 1000000 + $(valid_for "$event" | awk '{printf "%d", $1 * 1000}')))
held() {
  local line left
  while :; do
    left=$((until - $(date +%s%N) / 1000000))
    [ "$left" -gt 0 ] || return 1 # silence past valid_for_seconds
    read -r -t 0 <&3 || return 0  # no line waiting: still ours
    IFS= read -r -t "$(awk "BEGIN{print $left/1000}")" line <&3 || return 1 # the stream ended
    case "$line" in
    *'"event":"lost"'* | *'"event":"released"'*) return 1 ;;
    *valid_for_seconds*) until=$(($(date +%s%N) / 1000000 + $(valid_for "$line" | awk '{printf "%d", $1 * 1000}'))) ;;
    esac
  done
}
case "$event" in
*'"event":"granted"'*)
  fence=$(sed 's/.*"fence":\([0-9]*\).*/\1/' <<<"$event")
  echo "running $key with fence $fence" # pass the fence to what you write
  for step in 1 2 3; do
    held || { echo "baton: lock lost, work stopped" >&2; exit 1; }
    sleep 0.1 # a step of the work, with the fence
  done
  kill "$curl_pid" # closing the connection releases the lock
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
