//go:build e2e

// Package e2e is Baton's reliability suite: real sidecar processes on real
// etcd members (child processes, single or a 3-member cluster), app
// simulators on their unix sockets and a fenced checker store, under
// crashes, pauses, partitions and bad input. Every scenario checks that no
// two holders ever act: the fence and lost-update invariants always, the
// porcupine mutex model on fault-free runs. See RELIABILITY.md for the plan.
//
// It runs in `make test` with short versions of S1–S13 and S15–S24; BATON_SOAK=1 (make
// soak) runs S14 and longer versions. BATON_E2E_REPORT=path writes the
// summary as markdown (make test-e2e writes test/e2e/REPORT.md).
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// batonBin is the sidecar binary built once for the run.
var batonBin string

func TestMain(m *testing.M) {
	if spec := os.Getenv(etcdChildEnv); spec != "" {
		os.Exit(runEtcdChild(spec))
	}
	if sock := os.Getenv(writerEnv); sock != "" {
		os.Exit(runWriter(sock))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "baton-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	batonBin = filepath.Join(dir, "baton")
	args := []string{"build", "-o", batonBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/baton-dev/baton/cmd/sidecar")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		return 1
	}
	code := m.Run()
	if err := report.finish(os.Stdout, os.Getenv("BATON_E2E_REPORT")); err != nil {
		fmt.Fprintln(os.Stderr, "e2e report:", err)
		return 1
	}
	return code
}
