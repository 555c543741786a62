package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// usageError marks errors in the command line or configuration (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func isUsageError(err error) bool {
	var u usageError
	return errors.As(err, &u) || strings.HasPrefix(err.Error(), "unknown command") ||
		strings.HasPrefix(err.Error(), "unknown flag") || strings.Contains(err.Error(), "invalid argument")
}

func newRootCmd(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer, setProcs func(int) int) *cobra.Command {
	root := &cobra.Command{
		Use:           "baton",
		Short:         "Baton: locks for the workloads of a Kubernetes pod, over a unix socket, on etcd",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	root.AddCommand(newServeCmd(getenv, stdout, stderr, setProcs), newRunCmd(getenv, stdout, stderr), newLocksCmd(getenv, stdout), newMirrorCmd(getenv, stderr), newInstallCmd(stdout))
	return root
}

// bindEnv sets every flag of fs not given on the command line from its
// environment variable BATON_<NAME> (dashes become underscores). A bad value
// is an error naming both.
func bindEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed {
			return
		}
		name := envName(f.Name)
		if v := getenv(name); v != "" {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = usageError{fmt.Errorf("%s=%q (for --%s): %w", name, v, f.Name, serr)}
			}
		}
	})
	return err
}

func envName(flag string) string {
	return "BATON_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}
