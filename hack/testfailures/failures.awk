# failures.awk prints what go test said of each failure in the logs it
# reads: every "--- FAIL" line with the indented lines of its messages
# under it (at most 60 per failure), a panic with the 12 lines after it
# (the tests it interrupted, the top of its first goroutine),
# and the packages' FAIL lines. make test prints it last, so that a log
# cut to its tail still says what failed and why.
FNR == 1 { file = FILENAME; sub(/.*\//, "", file); block = 0; after = 0 }
after > 0 { print file ": " $0; after--; next }
/^(panic:|fatal error:)/ { print file ": " $0; after = 12; next }
/^[ \t]*--- FAIL/ { block = 1; lines = 0; print file ": " $0; next }
block && /^(    |\t)/ && lines < 60 { print file ": " $0; lines++; next }
{ block = 0 }
/^FAIL[ \t]/ { print file ": " $0 }
