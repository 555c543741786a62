// Command image writes a container image as a docker-archive tarball (what
// `docker save` writes and `docker load`, `ctr images import` and kind
// read) from files on disk, without a container engine or a registry: one
// layer holding the files given, a config naming the entrypoint and user,
// linux/amd64. The same inputs give the same bytes: every timestamp is the
// Unix epoch, every file is owned by root, and the entries are sorted.
//
//	image -o bin/images/baton.tar -tag ghcr.io/baton-dev/baton:0.1.0 \
//	  -entrypoint /baton -user 65532:65532 -file /baton=bin/image/baton:0755
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	out := fs.String("o", "", "the tarball to write")
	tag := fs.String("tag", "", "the image's name, e.g. ghcr.io/baton-dev/baton:0.1.0")
	entrypoint := fs.String("entrypoint", "", "the entrypoint, words separated by spaces")
	user := fs.String("user", "", "the user to run as, e.g. 65532:65532")
	var files, links, dirs, env list
	fs.Var(&files, "file", "DST=SRC[:MODE]: put the file SRC at DST in the image (repeatable; mode in octal, default 0644)")
	fs.Var(&links, "link", "DST=TARGET: a symbolic link (repeatable)")
	fs.Var(&dirs, "dir", "DST[:MODE]: an empty directory (repeatable; default 0755)")
	fs.Var(&env, "env", "NAME=VALUE in the image's environment (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *tag == "" {
		return errors.New("-o and -tag are required")
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	layer, err := layerOf(files, links, dirs)
	if err != nil {
		return err
	}
	cfg := &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Config:       v1.Config{User: *user, Env: env},
	}
	if *entrypoint != "" {
		cfg.Config.Entrypoint = strings.Fields(*entrypoint)
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return err
	}
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return err
	}
	if img, err = mutate.CreatedAt(img, v1.Time{Time: time.Unix(0, 0).UTC()}); err != nil {
		return err
	}
	tmp := *out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return err
	}
	return os.Rename(tmp, *out)
}

// entry is one file, directory or link of the layer.
type entry struct {
	hdr  tar.Header
	data []byte
}

// layerOf builds the layer: the directories every entry needs, then the
// entries, sorted by name.
func layerOf(files, links, dirs list) (v1.Layer, error) {
	entries := map[string]entry{}
	addDir := func(dir string, mode int64) {
		for d := dir; d != "/" && d != "."; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755}}
			}
		}
		if mode != 0 {
			e := entries[dir]
			e.hdr.Mode = mode
			entries[dir] = e
		}
	}
	for _, f := range files {
		dst, src, ok := strings.Cut(f, "=")
		if !ok || !path.IsAbs(dst) {
			return nil, fmt.Errorf("-file %q: want /DST=SRC[:MODE]", f)
		}
		mode := int64(0o644)
		if i := strings.LastIndexByte(src, ':'); i > 0 {
			m, err := strconv.ParseInt(src[i+1:], 8, 32)
			if err != nil {
				return nil, fmt.Errorf("-file %q: mode %q is not octal", f, src[i+1:])
			}
			src, mode = src[:i], m
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		addDir(path.Dir(dst), 0)
		entries[dst] = entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(dst, "/"), Mode: mode, Size: int64(len(data))}, data: data}
	}
	for _, l := range links {
		dst, target, ok := strings.Cut(l, "=")
		if !ok || !path.IsAbs(dst) || target == "" {
			return nil, fmt.Errorf("-link %q: want /DST=TARGET", l)
		}
		addDir(path.Dir(dst), 0)
		entries[dst] = entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(dst, "/"), Linkname: target, Mode: 0o777}}
	}
	for _, d := range dirs {
		dst, m, _ := strings.Cut(d, ":")
		mode := int64(0o755)
		if m != "" {
			v, err := strconv.ParseInt(m, 8, 32)
			if err != nil {
				return nil, fmt.Errorf("-dir %q: mode %q is not octal", d, m)
			}
			mode = v
		}
		if !path.IsAbs(dst) {
			return nil, fmt.Errorf("-dir %q: want an absolute path", d)
		}
		addDir(dst, mode)
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := entries[n]
		e.hdr.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer)), nil })
}
