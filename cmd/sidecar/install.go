package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// newInstallCmd copies this binary into a path, for an app container whose
// image lacks it: an init container of the baton image installs it into a
// volume the app mounts, and the app runs its phases under `baton run`.
func newInstallCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "install PATH",
		Short: "Copy this baton binary to PATH (for app containers, which then use baton run and baton locks)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find this binary: %w", err)
			}
			if err := copyExecutable(self, args[0]); err != nil {
				return err
			}
			fmt.Fprintln(stdout, "installed", args[0])
			return nil
		},
	}
}

// copyExecutable copies src to dst (mode 0755) through a temporary file in
// dst's directory, so that dst is never seen half-written.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".baton-install-*")
	if err != nil {
		return fmt.Errorf("install %s: %w", dst, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return fmt.Errorf("install %s: %w", dst, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return fmt.Errorf("install %s: %w", dst, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install %s: %w", dst, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("install %s: %w", dst, err)
	}
	return nil
}
