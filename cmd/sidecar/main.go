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
	"runtime"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		// A second signal to a shutting-down baton serve kills it: its
		// locks stay held until its lease expires.
		<-ctx.Done()
		stop()
	}()
	code := runWith(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, runtime.GOMAXPROCS)
	stop()
	os.Exit(code)
}

// run executes the command line and returns the process exit code: 0 on
// success, 2 for a bad command line or configuration, 1 for a failure.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return runWith(ctx, args, getenv, stdout, stderr, nil)
}

// runWith is run with setProcs, which sets the process's GOMAXPROCS
// (runtime.GOMAXPROCS in main); nil leaves it alone, as a command run
// inside a test must.
func runWith(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, setProcs func(int) int) int {
	root := newRootCmd(ctx, getenv, stdout, stderr, setProcs)
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
