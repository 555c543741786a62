#!/bin/sh
# file-write.sh FENCE BODY: write BODY to ./report with the holder's fence,
# on one machine. flock makes the check and the write one step; the fence
# is the file's first line, written with the body by one rename. Exits 1,
# writing nothing, when a holder with a higher fence wrote since.
set -eu
case $1 in '' | *[!0-9]*) echo "FENCE must be a number: $1" >&2; exit 2 ;; esac
exec 9>report.lock
flock 9
last=$(head -n 1 report 2>/dev/null || echo 0)
case $last in '' | *[!0-9]*) echo "./report's first line is not a fence: $last" >&2; exit 2 ;; esac
if [ "$1" -lt "$last" ]; then
  echo "refused: fence $1 is below $last, which wrote ./report" >&2
  exit 1
fi
printf '%s\n%s\n' "$1" "$2" > report.tmp
mv report.tmp report
echo "written with fence $1"
