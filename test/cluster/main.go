// Command cluster runs the test node (package kubenode) for a person:
// `make cluster` starts it in the background and prints the line that
// points kubectl and helm at it; `make cluster-down` stops it. The images
// the chart's default values name are loaded, so a plain helm install of
// charts/baton works there.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/baton-dev/baton/internal/testing/kubenode"
)

func main() {
	dir := flag.String("dir", "bin/node", "the node's state, certificates and logs")
	bin := flag.String("bin", "bin/k8s", "the Kubernetes binaries")
	images := flag.String("images", "bin/images", "the image tarballs")
	ready := flag.String("ready-file", "", "written with the kubeconfig's path once the node is Ready")
	flag.Parse()
	if err := run(*dir, *bin, *images, *ready); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(dir, bin, images, ready string) error {
	abs := func(p string) string { a, _ := filepath.Abs(p); return a }
	dir, bin, images = abs(dir), abs(bin), abs(images)
	// A node killed half-way left its pods, mounts under dir, chains and
	// settings: undo that first, or dir cannot even be removed.
	if err := kubenode.Clean(dir, bin); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	var tarballs []string
	for _, name := range []string{"pause", "coredns", "baton", "etcd", "app", "busybox"} {
		tarballs = append(tarballs, filepath.Join(images, name+".tar"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	n, err := kubenode.Start(ctx, kubenode.Config{Dir: dir, Bin: bin, Images: tarballs,
		PauseImage: "docker.io/baton/pause:local", DNSImage: "docker.io/baton/coredns:local"})
	if err != nil {
		return err
	}
	defer n.Stop()
	if ready != "" {
		if err := os.WriteFile(ready, []byte(n.Kubeconfig+"\n"), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("node Ready; logs in %s\nexport KUBECONFIG=%s\n", n.LogDir(), n.Kubeconfig)
	<-ctx.Done()
	fmt.Println("stopping the node")
	return nil
}
