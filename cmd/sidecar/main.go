// Command baton is the Baton sidecar: a lock coordinator that answers
// "may I run?" over HTTP+JSON on a unix socket, backed by etcd.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line and returns the process exit code: 0 on
// success, 2 for a bad command line or configuration, 1 for a failure.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	root := newRootCmd(ctx, getenv, stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, "baton:", ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "baton:", err)
	if isUsageError(err) {
		return 2
	}
	return 1
}
