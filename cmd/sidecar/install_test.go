package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstallCopiesARunnableBinary(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "baton")
	out, err := exec.Command(binary(t), "install", dst).CombinedOutput()
	if err != nil {
		t.Fatalf("install: %v: %s", err, out)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("installed file: %v, %v", fi, err)
	}
	help, err := exec.Command(dst, "run", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(help), "--key") {
		t.Errorf("the copy does not run: %v: %s", err, help)
	}
	entries, _ := os.ReadDir(filepath.Dir(dst))
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
}

func TestInstallIntoAMissingDirectoryFails(t *testing.T) {
	out, err := exec.Command(binary(t), "install", "/nonexistent/dir/baton").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "/nonexistent/dir/baton") {
		t.Errorf("install into a missing directory: %v: %s", err, out)
	}
}
