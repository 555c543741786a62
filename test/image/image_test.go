// Package image tests the images `make image` writes into bin/images: each
// is a docker-archive that docker and containerd load, names what the
// chart's default values name, holds a static binary that runs, and comes
// out byte for byte the same from the same inputs.
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

const root = "../.."

// dir is where make image wrote the tarballs: $BATON_IMAGES or bin/images.
func dir(t *testing.T) string {
	d := os.Getenv("BATON_IMAGES")
	if d == "" {
		d = filepath.Join(root, "bin", "images")
	}
	if _, err := os.Stat(filepath.Join(d, "baton.tar")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v; make test runs make image first", err)
		}
		t.Skipf("%v; run make image", err)
	}
	return d
}

// archive is a docker-archive read back: its manifest, the config of its
// one image and the files of its layers.
type archive struct {
	repoTags []string
	config   struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Config       struct {
			Entrypoint []string `json:"Entrypoint"`
			User       string   `json:"User"`
			Env        []string `json:"Env"`
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	files map[string]file
}

type file struct {
	hdr  *tar.Header
	data []byte
}

func read(t *testing.T, path string) archive {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blobs := map[string][]byte{}
	for _, e := range untar(t, f) {
		blobs[e.hdr.Name] = e.data
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(blobs["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json: %v, %d images; want one", err, len(manifest))
	}
	a := archive{repoTags: manifest[0].RepoTags, files: map[string]file{}}
	if err := json.Unmarshal(blobs[manifest[0].Config], &a.config); err != nil {
		t.Fatalf("config %s: %v", manifest[0].Config, err)
	}
	if len(a.config.RootFS.DiffIDs) != len(manifest[0].Layers) {
		t.Fatalf("%d diff_ids for %d layers", len(a.config.RootFS.DiffIDs), len(manifest[0].Layers))
	}
	for i, name := range manifest[0].Layers {
		zr, err := gzip.NewReader(bytes.NewReader(blobs[name]))
		if err != nil {
			t.Fatalf("layer %s: %v", name, err)
		}
		layer, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("layer %s: %v", name, err)
		}
		// The config names each layer by the digest of its uncompressed
		// tar: what a runtime checks when it unpacks it.
		if sum := sha256.Sum256(layer); "sha256:"+hex.EncodeToString(sum[:]) != a.config.RootFS.DiffIDs[i] {
			t.Errorf("layer %s: diff_id %s is not its digest", name, a.config.RootFS.DiffIDs[i])
		}
		for _, e := range untar(t, bytes.NewReader(layer)) {
			a.files["/"+strings.TrimSuffix(e.hdr.Name, "/")] = e
		}
	}
	return a
}

// untar reads every entry of a tar stream.
func untar(t *testing.T, r io.Reader) []file {
	t.Helper()
	var out []file
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, file{hdr, b})
	}
}

// runStatic writes the image's file at path to disk, checks that it is a
// static executable (no interpreter: the images have no libc), runs it
// with args and returns its output.
func (a archive) runStatic(t *testing.T, path string, args ...string) string {
	t.Helper()
	f, ok := a.files[path]
	if !ok || f.hdr.Typeflag != tar.TypeReg || f.hdr.Mode&0o111 == 0 {
		t.Fatalf("%s: not an executable file in the image (%+v)", path, f.hdr)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(bin, f.data, 0o755); err != nil {
		t.Fatal(err)
	}
	if !isStatic(t, bin) {
		t.Errorf("%s is dynamically linked; the image has no libc", path)
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", path, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// isStatic reports whether the executable at path needs no interpreter
// (no dynamic loader, no libc).
func isStatic(t *testing.T, path string) bool {
	t.Helper()
	e, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, p := range e.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// chartImages returns the images the chart's default values name: Baton's
// at the chart's appVersion, and etcd's.
func chartImages(t *testing.T) (baton, etcd string) {
	t.Helper()
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Image struct{ Repository, Tag string }
		Etcd  struct {
			Image struct{ Repository, Tag string }
		}
	}
	for file, into := range map[string]any{"Chart.yaml": &chart, "values.yaml": &values} {
		b, err := os.ReadFile(filepath.Join(root, "charts", "baton", file))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, into); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	tag := values.Image.Tag
	if tag == "" {
		tag = chart.AppVersion
	}
	return values.Image.Repository + ":" + tag, values.Etcd.Image.Repository + ":" + values.Etcd.Image.Tag
}

func TestBatonImage(t *testing.T) {
	a := read(t, filepath.Join(dir(t), "baton.tar"))
	want, _ := chartImages(t)
	if !slices.Equal(a.repoTags, []string{want}) {
		t.Errorf("tags %v, want %s: the chart's default values would not find it", a.repoTags, want)
	}
	c := a.config
	if c.OS != "linux" || c.Architecture != "amd64" || !slices.Equal(c.Config.Entrypoint, []string{"/baton"}) || c.Config.User != "65532:65532" {
		t.Errorf("config %+v: want linux/amd64, entrypoint /baton, user 65532:65532", c)
	}
	if tmp := a.files["/tmp"]; tmp.hdr == nil || tmp.hdr.Typeflag != tar.TypeDir || tmp.hdr.Mode != 0o1777 {
		t.Errorf("/tmp: %+v, want a directory with mode 1777", tmp.hdr)
	}
	for _, bin := range []string{"/baton", "/baton-dapr", "/baton-controller"} {
		if out := a.runStatic(t, bin, "version"); !strings.HasPrefix(out, "baton ") || !strings.Contains(out, "etcd 3.7.3") {
			t.Errorf("%s version: %q", bin, out)
		}
	}
	// The entrypoint, what every pod's sidecar runs, is the lean build;
	// the controller's command is the full one.
	if out := a.runStatic(t, "/baton", "--help"); strings.Contains(out, "mirror") {
		t.Errorf("/baton --help lists mirror: not the lean build\n%s", out)
	}
	// Dapr's gRPC service is in /baton-dapr, not in /baton.
	const daprService = "dapr.proto.runtime.v1.Dapr"
	if bytes.Contains(a.files["/baton"].data, []byte(daprService)) || !bytes.Contains(a.files["/baton-dapr"].data, []byte(daprService)) {
		t.Errorf("%s: want it in /baton-dapr only", daprService)
	}
	if out := a.runStatic(t, "/baton-controller", "mirror", "--help"); !strings.Contains(out, "--inject-config") {
		t.Errorf("/baton-controller mirror --help: %q", out)
	}
}

func TestEtcdImage(t *testing.T) {
	a := read(t, filepath.Join(dir(t), "etcd.tar"))
	_, want := chartImages(t)
	if !slices.Equal(a.repoTags, []string{want}) {
		t.Errorf("tags %v, want %s: the chart's default values would not find it", a.repoTags, want)
	}
	// The chart runs `etcd ...` as its command: PATH must find it.
	if !slices.Contains(a.config.Config.Env, "PATH=/usr/local/bin") {
		t.Errorf("env %v: the chart's command etcd would not be found", a.config.Config.Env)
	}
	tag := want[strings.LastIndexByte(want, ':')+2:] // v3.7.3 → 3.7.3
	if out := a.runStatic(t, "/usr/local/bin/etcd", "--version"); !strings.Contains(out, "etcd Version: "+tag) {
		t.Errorf("etcd --version: %q, want %s", out, tag)
	}
}

// TestImagesAreReproducible: the image writer gives the same bytes for
// the same inputs, whatever their timestamps.
func TestImagesAreReproducible(t *testing.T) {
	tool := os.Getenv("BATON_IMAGE_TOOL")
	if tool == "" {
		tool = filepath.Join(root, "bin", "image")
	}
	a := read(t, filepath.Join(dir(t), "baton.tar"))
	work := t.TempDir()
	src := filepath.Join(work, "baton")
	if err := os.WriteFile(src, a.files["/baton"].data, 0o755); err != nil {
		t.Fatal(err)
	}
	var sums []string
	for i, mtime := range []time.Time{time.Now(), time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)} {
		if err := os.Chtimes(src, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(work, fmt.Sprintf("%d.tar", i))
		b, err := exec.Command(tool, "-o", out, "-tag", "docker.io/local/baton:test", "-entrypoint", "/baton", "-user", "65532:65532",
			"-file", "/baton="+src+":0755", "-dir", "/tmp:1777").CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", tool, err, b)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		sums = append(sums, hex.EncodeToString(sum[:]))
	}
	if sums[0] != sums[1] {
		t.Errorf("two writes of one image differ: %v", sums)
	}
}
