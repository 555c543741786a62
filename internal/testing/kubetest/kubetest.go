// Package kubetest gives tests a real kube-apiserver: envtest, with the
// binaries that `make envtest-assets` builds into bin/k8s.
package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Assets returns the directory of the test kube-apiserver and etcd:
// $KUBEBUILDER_ASSETS, or bin/k8s under root (the module's root, relative
// to the test's directory). It sets $KUBEBUILDER_ASSETS, which kubectl in
// tests reads too.
func Assets(root string) (string, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		var err error
		if assets, err = filepath.Abs(filepath.Join(root, "bin", "k8s")); err != nil {
			return "", err
		}
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		return "", fmt.Errorf("%w; run make envtest-assets (make test does)", err)
	}
	os.Setenv("KUBEBUILDER_ASSETS", assets)
	return assets, nil
}

// Start starts env with the assets under root.
func Start(env *envtest.Environment, root string) (*rest.Config, error) {
	assets, err := Assets(root)
	if err != nil {
		return nil, err
	}
	env.BinaryAssetsDirectory = assets
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest: %w", err)
	}
	return cfg, nil
}

// Unavailable handles a test environment that could not start: under CI
// (CI=true), where skipping would hide the tests, it prints err for what
// and exits 1; elsewhere it returns the reason to skip the tests with.
func Unavailable(what string, err error) string {
	if os.Getenv("CI") == "true" {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		os.Exit(1)
	}
	return err.Error()
}

// Run starts mgr until the returned stop is called, or the test ends;
// stop waits for it, and fails the test if it ended with an error.
func Run(t testing.TB, mgr manager.Manager) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
