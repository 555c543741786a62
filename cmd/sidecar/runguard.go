package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-dev/baton/internal/guard"
)

// newRunGuardCmd is the guard's command, which baton run alone starts
// (package guard: the process that stops every process of the command's).
func newRunGuardCmd(stderr io.Writer) *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:    "run-guard --kill-grace D -- COMMAND [ARGS...]",
		Short:  "Run a command for baton run and stop every process it starts (started by baton run only)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			code, err := guard.Run(args, grace, stderr)
			if errors.Is(err, guard.ErrNotStarted) {
				return usageError{errors.New("run-guard is started by baton run, not by hand")}
			}
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code, ""}
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&grace, "kill-grace", 5*time.Second, "time between SIGTERM and SIGKILL")
	return cmd
}

// startGuarded starts args through a guard, baton run-guard, that stops
// every process of the command's within grace (guard.Start).
func startGuarded(args, env []string, grace time.Duration, conn *os.File, stdout, stderr io.Writer) (*guard.Tree, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find baton's own executable for the guard: %w", err)
	}
	return guard.Start([]string{self, "run-guard", "--kill-grace", grace.String(), "--"}, args, env, grace, conn, stdout, stderr)
}
