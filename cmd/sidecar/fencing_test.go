package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// holder2 is what the second holder writes last.
const holder2 = `holder 2, "second" \ last`

// A store of docs/fencing.md: how to make it ready, the write recipe that
// compares the fence, and how to read what was written last.
type fencedStore struct {
	name  string
	write string                                        // the recipe, under examples/fencing
	setup func(t *testing.T, dir string) (env []string) // dir: the writers' working directory
	read  func(t *testing.T, run func(string) string) string
}

// TestFencingRecipes runs docs/fencing.md's recipes against the real
// stores: PostgreSQL (a server the test starts from Debian's packages),
// etcd, a Kubernetes API server (a ValidatingAdmissionPolicy) and a file.
// In each, a holder takes a lock with a ttl of 2s and writes with its
// fence; it is paused (SIGSTOP) past its ttl; the next holder takes the
// lock through the other sidecar with a higher fence and writes; the
// first is resumed and writes again with its old fence, and that write is
// refused: the store keeps the second holder's.
func TestFencingRecipes(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "fencing.md"))
	if err != nil {
		t.Fatal(err)
	}
	recipes := filepath.Join(root, "examples", "fencing")
	files, err := filepath.Glob(filepath.Join(recipes, "*"))
	if err != nil || len(files) < 7 {
		t.Fatalf("examples/fencing: %v, %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(page), "\n"+string(b)+"```\n") {
			t.Errorf("docs/fencing.md does not show examples/fencing/%s as it is", filepath.Base(f))
		}
	}

	pa, pb := twoSidecars(t, "fencing")
	for _, s := range []fencedStore{postgresStore(), etcdStore(), kubeStore(), fileStore()} {
		t.Run(s.name, func(t *testing.T) {
			dir := t.TempDir()
			env := withK8sBin(t, s.setup(t, dir)...)
			run := func(line string) string {
				t.Helper()
				cmd := exec.Command("sh", "-c", line)
				cmd.Dir, cmd.Env = dir, env
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s: %v\n%s", line, err, out)
				}
				return string(out)
			}
			pausedHolder(t, filepath.Join(recipes, s.write), "fencing/"+s.name, dir, env, pa.socket, pb.socket, run)
			if got := s.read(t, run); got != holder2 {
				t.Errorf("the %s store holds %q after the paused holder's late write, want holder 2's", s.name, got)
			}
		})
	}
}

// pausedHolder: holder 1 takes key through socket a with a ttl of 2s and
// writes with its fence, then is paused (SIGSTOP of its process group)
// past the ttl. Holder 2 takes key through socket b, with a higher fence,
// and writes. Holder 1, resumed, writes with its fence again: write must
// refuse it (exit 1).
func pausedHolder(t *testing.T, write, key, dir string, env []string, a, b string, run func(string) string) {
	t.Helper()
	holder := exec.Command("sh", "-c", `set -eu
grant=$(curl -sf --unix-socket "$BATON_SOCKET" -X POST "http://baton/v1/locks/$KEY" -d '{"owner":"holder-1","ttl":"2s"}')
fence=$(echo "$grant" | sed 's/.*"fence":\([0-9]*\).*/\1/')
"$WRITE" "$fence" "holder 1"
echo "fence $fence"
read resumed
exec "$WRITE" "$fence" "holder 1, late"`)
	holder.Dir = dir
	holder.Env = append(env, "BATON_SOCKET="+a, "KEY="+key, "WRITE="+write)
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	holder.Stderr = &stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		syscall.Kill(-holder.Process.Pid, syscall.SIGKILL)
		holder.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	var first int64
	for lines.Scan() {
		if m := regexp.MustCompile(`^fence (\d+)$`).FindStringSubmatch(lines.Text()); m != nil {
			first, _ = strconv.ParseInt(m[1], 10, 64)
			break
		}
	}
	if first == 0 {
		t.Fatalf("holder 1 did not take the lock and write: %s", stderr.String())
	}
	if err := syscall.Kill(-holder.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()

	// Holder 2 waits for the lock, which holder 1's ttl frees.
	grant := run(`curl -sf --unix-socket ` + b + ` -X POST http://baton/v1/locks/` + key + ` -d '{"owner":"holder-2","ttl":"1m","wait":"30s"}'`)
	m := regexp.MustCompile(`"fence":(\d+)`).FindStringSubmatch(grant)
	if m == nil {
		t.Fatalf("holder 2's grant: %s", grant)
	}
	second, _ := strconv.ParseInt(m[1], 10, 64)
	if second <= first {
		t.Fatalf("holder 2's fence %d is not above holder 1's %d", second, first)
	}
	t.Logf("holder 1 (fence %d) paused; holder 2 granted fence %d %v later", first, second, time.Since(paused).Round(time.Millisecond))
	// It writes twice with its fence: a holder may write again, and a
	// value with quotes and a backslash is written as it is.
	run(write + " " + m[1] + " 'holder 2, first'")
	run(write + " " + m[1] + " '" + holder2 + "'")
	defer run(`curl -sf --unix-socket ` + b + ` -X DELETE 'http://baton/v1/locks/` + key + `?owner=holder-2'`)

	if _, err := stdin.Write([]byte("resumed\n")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-holder.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	err = holder.Wait()
	if code := holder.ProcessState.ExitCode(); code != 1 || !regexp.MustCompile(`refused|is below`).MatchString(stderr.String()) {
		t.Fatalf("holder 1's late write with fence %d: %v (exit %d), want it refused (exit 1): %s", first, err, code, stderr.String())
	}
	t.Logf("holder 1's late write with fence %d refused: %s", first, strings.TrimSpace(stderr.String()))
}
