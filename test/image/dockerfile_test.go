package image

import (
	"encoding/json"
	"go/version"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// instruction is one instruction of a Dockerfile, its continuation lines
// joined.
type instruction struct {
	op   string // upper case: FROM, RUN, COPY...
	args string
}

// stage is the instructions of one FROM.
type stage struct {
	base, name string
	steps      []instruction
}

// parseDockerfile reads the Dockerfile's stages. It knows the few
// instructions the project's Dockerfile uses and fails on any other, so
// that a change to the Dockerfile comes with a change to this test.
func parseDockerfile(t *testing.T, path string) []stage {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var stages []stage
	var line string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			line += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		line += l
		if line == "" {
			continue
		}
		op, args, _ := strings.Cut(line, " ")
		line = ""
		in := instruction{strings.ToUpper(op), strings.TrimSpace(args)}
		switch in.op {
		case "FROM":
			f := strings.Fields(in.args)
			s := stage{base: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
		case "WORKDIR", "COPY", "ARG", "RUN", "USER", "ENTRYPOINT":
			if len(stages) == 0 {
				t.Fatalf("Dockerfile: %s before FROM", in.op)
			}
			stages[len(stages)-1].steps = append(stages[len(stages)-1].steps, in)
		default:
			t.Fatalf("Dockerfile: %s is an instruction this test does not know; teach it", in.op)
		}
	}
	return stages
}

// TestDockerfile checks that the Dockerfile, for those who build with
// docker, gives the image make image writes. There is no docker engine
// (and no registry) on the test machines, so its build stage runs here as
// an engine would run it: the files its COPY instructions take from the
// repository into a directory standing for the stage's root, then its RUN
// commands with its ARGs set as make docker-image sets them, with the local
// Go (the version its base image names, or newer). The binary must be
// static, report the version given, and the final stage must run it as
// make image's image does. With a docker engine, make docker-image is run
// and its image started too.
func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	if len(stages) != 2 || stages[0].name == "" {
		t.Fatalf("Dockerfile: %d stages; want a named build stage and the image", len(stages))
	}
	build, final := stages[0], stages[1]

	// The Go of the build stage can build the module.
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goMod := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(gomod)
	if goMod == nil {
		t.Fatal("go.mod has no go line")
	}
	goImage, ok := strings.CutPrefix(build.base, "golang:")
	if !ok || !version.IsValid("go"+goImage) || version.Compare("go"+goImage, "go"+string(goMod[1])) < 0 {
		t.Errorf("build stage FROM %s: want golang at go.mod's go %s or newer", build.base, goMod[1])
	}

	// The ARGs the build stage declares are the build args make
	// docker-image passes.
	var args []string
	for _, in := range build.steps {
		if in.op == "ARG" {
			name, _, _ := strings.Cut(in.args, "=")
			args = append(args, name)
		}
	}
	dry, err := exec.Command("make", "-C", root, "--no-print-directory", "-n", "docker-image", "VERSION=v9.8.7-test", "COMMIT=c0ffee1").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n docker-image: %v\n%s", err, dry)
	}
	passed := regexp.MustCompile(`--build-arg (\w+)=`).FindAllStringSubmatch(string(dry), -1)
	var names []string
	for _, m := range passed {
		names = append(names, m[1])
	}
	if slices.Sort(args); !slices.Equal(args, slices.Sorted(slices.Values(names))) {
		t.Errorf("the Dockerfile's ARGs %v, make docker-image's build args %v", args, names)
	}

	// Run the build stage.
	stageRoot := t.TempDir()
	work := stageRoot
	env := append(os.Environ(), "CGO_ENABLED=", "GOFLAGS=")
	abs := func(p string) string { return filepath.Join(stageRoot, p) }
	// What the final stage copies out of the build stage is where the
	// build stage's commands write it.
	var outputs []string
	for _, in := range final.steps {
		if in.op == "COPY" && strings.HasPrefix(in.args, "--from="+build.name+" ") {
			outputs = append(outputs, strings.Fields(in.args)[1])
		}
	}
	for _, in := range build.steps {
		switch in.op {
		case "WORKDIR":
			work = abs(in.args)
			if err := os.MkdirAll(work, 0o755); err != nil {
				t.Fatal(err)
			}
		case "ARG":
			name, _, _ := strings.Cut(in.args, "=")
			env = append(env, name+"="+map[string]string{"VERSION": "v9.8.7-test", "COMMIT": "c0ffee1"}[name])
		case "COPY":
			f := strings.Fields(in.args)
			dst := f[len(f)-1]
			if !filepath.IsAbs(dst) {
				dst = filepath.Join(strings.TrimPrefix(work, stageRoot), dst)
			}
			for _, src := range f[:len(f)-1] {
				to := abs(dst)
				if strings.HasSuffix(f[len(f)-1], "/") {
					to = filepath.Join(to, filepath.Base(src))
				}
				copyTree(t, filepath.Join(root, src), to)
			}
		case "RUN":
			cmdline := in.args
			for _, o := range outputs {
				cmdline = regexp.MustCompile(`(\s)`+regexp.QuoteMeta(o)+`(\s|$)`).ReplaceAllString(cmdline, "${1}"+abs(o)+"${2}")
			}
			cmd := exec.Command("sh", "-c", cmdline)
			cmd.Dir, cmd.Env = work, env
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("RUN %s: %v\n%s", in.args, err, out)
			}
		}
	}

	// The image: the binaries copied out of the build stage (the lean
	// sidecar, the one with Dapr's API and the controller's full build),
	// run as make image's image runs them.
	if !slices.Equal(outputs, []string{"/baton", "/baton-dapr", "/baton-controller"}) {
		t.Fatalf("the image copies %v out of the build stage; want /baton, /baton-dapr and /baton-controller", outputs)
	}
	for _, o := range outputs {
		bin := abs(o)
		if !isStatic(t, bin) {
			t.Errorf("%s is dynamically linked; %s has no libc", o, final.base)
		}
		if out, err := exec.Command(bin, "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "baton v9.8.7-test (commit c0ffee1,") {
			t.Errorf("%s version of the Dockerfile's build: %v %q; want the VERSION and COMMIT given", o, err, out)
		}
	}
	if out, err := exec.Command(abs("/baton"), "mirror").CombinedOutput(); err == nil || !strings.Contains(string(out), "unknown command") {
		t.Errorf("/baton mirror: %v %q; want unknown command, /baton is the lean build", err, out)
	}
	img := read(t, filepath.Join(dir(t), "baton.tar")).config.Config
	var user string
	var entrypoint []string
	for _, in := range final.steps {
		switch in.op {
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.args), &entrypoint); err != nil {
				t.Errorf("ENTRYPOINT %s: want the exec (JSON) form: %v", in.args, err)
			}
		}
	}
	if user != img.User || !slices.Equal(entrypoint, img.Entrypoint) || !slices.Contains(entrypoint, outputs[0]) {
		t.Errorf("the Dockerfile's image runs %v as %q; make image's runs %v as %q", entrypoint, user, img.Entrypoint, img.User)
	}

	if exec.Command("docker", "info").Run() != nil {
		t.Log("no docker engine here: the build stage ran without one, the image's base was not pulled")
		return
	}
	if out, err := exec.Command("make", "-C", root, "docker-image", "IMAGE=baton-dockerfile-test:latest").CombinedOutput(); err != nil {
		t.Fatalf("make docker-image: %v\n%s", err, out)
	}
	if out, err := exec.Command("docker", "run", "--rm", "baton-dockerfile-test:latest", "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "baton ") {
		t.Errorf("docker run of the Dockerfile's image: %v %q", err, out)
	}
}

// copyTree copies the file or directory src to dst, as COPY does.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatalf("COPY %s: %v", src, err)
	}
}
