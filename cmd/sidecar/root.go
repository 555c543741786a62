package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/internal/version"
)

// usageError marks errors in the command line or configuration (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// isUsageError reports whether err is a bad command line: a usageError,
// which every error of flags and arguments is made into, or cobra's
// unknown subcommand, the one error it makes before any hook can wrap it.
func isUsageError(err error) bool {
	var u usageError
	return errors.As(err, &u) || strings.HasPrefix(err.Error(), "unknown command")
}

func newRootCmd(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer, setProcs func(int) int) *cobra.Command {
	root := &cobra.Command{
		Use:   "baton",
		Short: "Baton: locks for the workloads of a Kubernetes pod, over a unix socket, on etcd",
		Long: `Baton: locks for the workloads of a Kubernetes pod, over a unix socket, on etcd.

Every flag of every command can also be set by an environment variable
named BATON_ and the flag's name in capitals, dashes as underscores:
--lease-ttl by BATON_LEASE_TTL, --socket by BATON_SOCKET. A flag given on
the command line wins. (But for baton run's --key and --owner: a run gives
its command BATON_KEY and BATON_OWNER, which a run inside it must not take
for its own.)`,
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		// Every flag of every command reads BATON_<FLAG>. (A command with a
		// PersistentPreRunE of its own calls bindEnv itself.)
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return bindEnv(cmd.Flags(), getenv, stderr)
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newServeCmd(getenv, stdout, stderr, setProcs), newRunCmd(getenv, stdout, stderr), newElectCmd(getenv, stdout, stderr), newRunGuardCmd(stderr), newLocksCmd(getenv, stdout, stderr),
		newInstallCmd(stdout), newVersionCmd(stdout))
	root.AddCommand(kubeCommands(getenv, stdout, stderr)...)
	wrapArgs(root)
	return root
}

// wrapArgs makes the argument errors of cmd and its subcommands usage errors.
func wrapArgs(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		if c.Args != nil {
			c.Args = usageArgs(c, c.Args)
		}
		wrapArgs(c)
	}
}

// newVersionCmd prints what `baton --version` prints; -o json for scripts.
func newVersionCmd(stdout io.Writer) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print Baton's version, commit, and the Go and etcd versions it was built with",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			switch output {
			case "text":
				fmt.Fprintln(stdout, version.Get())
				return nil
			case "json":
				return writeJSONOut(stdout, version.Get())
			}
			return usageError{fmt.Errorf("--output %q: use text or json", output)}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

// socketFlag registers --socket, the sidecar's socket, on fs, and the name
// it had before, --socket-path, as a hidden alias (so also
// $BATON_SOCKET_PATH, which bindEnv reads only when $BATON_SOCKET is not
// set). bindEnv prints the notice that the old name is deprecated, on
// stderr: pflag's own notice goes where cobra prints, stdout, and would
// spoil the JSON of -o json.
func socketFlag(fs *pflag.FlagSet, p *string, usage string) {
	fs.StringVar(p, "socket", *p, usage)
	fs.StringVar(p, "socket-path", *p, usage)
	_ = fs.MarkHidden("socket-path") // cannot fail: the flag exists
}

// defaultSocket is where the sidecar's socket is in a pod.
const defaultSocket = baton.DefaultSocket

// renamedTo is the name now of a flag renamed, "" for any other flag.
func renamedTo(flag string) string {
	if flag == "socket-path" {
		return "socket"
	}
	return ""
}

// bindEnv sets every flag of fs not given on the command line from its
// environment variable BATON_<NAME> (dashes become underscores). A bad value
// is an error naming both. A renamed flag's former name still works, on the
// command line and in the environment, but its variable is read only when
// the new one's is not set, and with a notice on stderr.
func bindEnv(fs *pflag.FlagSet, getenv func(string) string, stderr io.Writer) error {
	given := func(name string) bool { // on the command line, under any name
		changed := false
		fs.VisitAll(func(f *pflag.Flag) {
			changed = changed || (f.Changed && (f.Name == name || renamedTo(f.Name) == name))
		})
		return changed
	}
	fs.Visit(func(f *pflag.Flag) {
		if now := renamedTo(f.Name); now != "" {
			fmt.Fprintf(stderr, "baton: --%s is deprecated and will go: use --%s\n", f.Name, now)
		}
	})
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil {
			return
		}
		name, now := envName(f.Name), renamedTo(f.Name)
		v := getenv(name)
		switch {
		case v == "":
			return
		case now == "" && given(f.Name):
			return
		case now != "" && (given(now) || getenv(envName(now)) != ""):
			return
		case now != "":
			fmt.Fprintf(stderr, "baton: %s is deprecated and will go: set %s\n", name, envName(now))
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = usageError{fmt.Errorf("%s=%q (for --%s): %w", name, v, f.Name, serr)}
		}
	})
	return err
}

func envName(flag string) string {
	return "BATON_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}
