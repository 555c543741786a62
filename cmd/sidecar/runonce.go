package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/keyspace"
)

// takeOnce makes o a run-once run of key (--once KEY), checking the flags
// that go with it.
func (o *runOptions) takeOnce(key string) error {
	switch {
	case key == "" && (o.ifDone != "" || o.ifFailed != ""):
		return usageError{errors.New("--if-done and --if-failed go with --once KEY")}
	case key == "":
		return nil
	case o.key != "":
		return usageError{errors.New("give --key or --once, not both: --once KEY is the key of a run-once run")}
	case o.ifDone != "" && o.ifDone != "skip" && o.ifDone != "rerun":
		return usageError{fmt.Errorf("--if-done %q: use skip or rerun", o.ifDone)}
	case o.ifFailed != "" && o.ifFailed != "retry" && o.ifFailed != "skip":
		return usageError{fmt.Errorf("--if-failed %q: use retry or skip", o.ifFailed)}
	case o.mode != "" || o.limit != 0 || o.weight != 0:
		return usageError{errors.New("--once runs one command at a time: no --mode, --limit or --weight")}
	}
	o.key, o.once = key, true
	return nil
}

// finisher returns the release of a run-once run: it records the
// command's outcome (succeeded on exit 0) with the result the command
// wrote to BATON_RESULT_FILE, or its exit status, and lets the lock go.
func (o runOptions) finisher(c *baton.Client, owner, resultFile string, stderr io.Writer) func(code int) error {
	return func(code int) error {
		result := fmt.Sprintf("exit %d", code)
		if b, err := os.ReadFile(resultFile); err == nil && len(b) > 0 {
			result = string(b[:min(len(b), keyspace.MaxResult)])
		}
		run, err := c.Finish(context.Background(), o.key, lockapi.Done{Owner: owner, OK: code == 0, Result: result})
		if err != nil {
			// The command ran, but its outcome is not recorded: the next
			// caller runs it again.
			return exitError{exitLost, fmt.Sprintf("%s ran (exit %d) but its outcome could not be recorded: %v", o.key, code, err)}
		}
		fmt.Fprintf(stderr, "baton: %s %s (fence %d), recorded until %s\n", o.key, run.Status, run.Fence, run.ExpiresAt.Format("2006-01-02T15:04:05Z07:00"))
		return nil
	}
}

// alreadyDone is the exit of a run-once run that did not run: 0 when the
// work succeeded already, 1 when it failed and is not to be retried.
func alreadyDone(msg string, run *lockapi.Run) error {
	if run != nil && run.Status == keyspace.RunSucceeded {
		return exitError{0, msg}
	}
	return exitError{1, msg}
}
