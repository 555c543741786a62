package keyspace

import (
	"errors"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	long := strings.Repeat("a", MaxSegmentLen)
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"single segment", "terraform-prod", true},
		{"two segments", "flow-123/readiness", true},
		{"all allowed characters", "Az09._-", true},
		{"eight segments", "a/b/c/d/e/f/g/h", true},
		{"longest segment", long, true},
		{"dots inside a segment", "a..b/.c", true},
		{"verb-like last segment", "flow/extend", true},
		{"empty", "", false},
		{"nine segments", "a/b/c/d/e/f/g/h/i", false},
		{"segment too long", long + "a", false},
		{"leading slash", "/a", false},
		{"trailing slash", "a/", false},
		{"double slash", "a//b", false},
		{"dot segment", "a/./b", false},
		{"dot-dot segment", "../etc", false},
		{"colon", "a:hold", false},
		{"percent", "a%2Fb", false},
		{"space", "a b", false},
		{"unicode", "résumé", false},
		{"nul byte", "a\x00", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := ParseKey(tt.in)
			if tt.ok {
				if err != nil {
					t.Fatalf("ParseKey(%q) = %v, want ok", tt.in, err)
				}
				if k.String() != tt.in {
					t.Fatalf("String() = %q, want %q", k.String(), tt.in)
				}
				return
			}
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("ParseKey(%q) error = %v, want ErrInvalidKey", tt.in, err)
			}
		})
	}
}

func TestValidateScopeAndPrefix(t *testing.T) {
	for _, s := range []string{"default", "kube-system", strings.Repeat("n", MaxScopeLen)} {
		if err := ValidateScope(s); err != nil {
			t.Errorf("ValidateScope(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"", "a/b", "..", strings.Repeat("n", MaxScopeLen+1), "ns:x"} {
		if err := ValidateScope(s); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidateScope(%q) = %v, want ErrInvalidKey", s, err)
		}
	}
	for _, p := range []string{"", "flow-1", "flow-1/", "a/b/c"} {
		if err := ValidatePrefix(p); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v", p, err)
		}
	}
	for _, p := range []string{"a%", "a b", "x:y", strings.Repeat("a", 2000)} {
		if err := ValidatePrefix(p); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidatePrefix(%q) = %v, want ErrInvalidKey", p, err)
		}
	}
}

func TestLayout(t *testing.T) {
	l, err := NewLayout("team-a")
	if err != nil {
		t.Fatal(err)
	}
	x, y := mustKey(t, "x"), mustKey(t, "x/y")
	if got, want := l.LockPrefix(x), "/baton/v1/team-a/locks/x/"; got != want {
		t.Errorf("LockPrefix(x) = %q, want %q", got, want)
	}
	if got, want := l.LockPrefix(y), "/baton/v1/team-a/locks/x%2Fy/"; got != want {
		t.Errorf("LockPrefix(x/y) = %q, want %q", got, want)
	}
	if got, want := l.ContenderKey(y, 0x1f), "/baton/v1/team-a/locks/x%2Fy/1f"; got != want {
		t.Errorf("ContenderKey = %q, want %q", got, want)
	}
	if strings.HasPrefix(l.ContenderKey(y, 1), l.LockPrefix(x)) {
		t.Error("lock x's prefix contains a contender of x/y")
	}
	if got, want := l.MutexName(x)+"/", l.LockPrefix(x); got != want {
		t.Errorf("MutexName+/ = %q, want LockPrefix %q", got, want)
	}
	k, pfx, ok := l.ParseContender(l.ContenderKey(y, 0xabc))
	if !ok || k != y || pfx != l.LockPrefix(y) {
		t.Errorf("ParseContender = %v %q %v", k, pfx, ok)
	}
	for _, bad := range []string{"/baton/v1/other/locks/x/1", "/baton/v1/team-a/locks/x", "/baton/v1/team-a/locks/x/", "/baton/v1/team-a/locks/a:b/1"} {
		if _, _, ok := l.ParseContender(bad); ok {
			t.Errorf("ParseContender(%q) ok, want not a contender", bad)
		}
	}
	if _, err := NewLayout("a/b"); err == nil {
		t.Error("NewLayout accepted a scope with a slash")
	}
}

func TestHolderRoundTrip(t *testing.T) {
	h := Holder{Owner: "exec-1", Pod: "api-7f9c", Namespace: "ns", Node: "n1"}
	got := DecodeHolder([]byte(h.Encode()))
	if got != h {
		t.Errorf("round trip = %+v, want %+v", got, h)
	}
	for _, v := range []string{"", "not json", `{"pod":"x"}`} {
		if h := DecodeHolder([]byte(v)); !h.Foreign {
			t.Errorf("DecodeHolder(%q) = %+v, want Foreign", v, h)
		}
	}
}

func mustKey(t *testing.T, s string) Key {
	t.Helper()
	k, err := ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// FuzzLockName checks that the etcd encoding of valid keys is injective and
// prefix-free: two different keys never share a contender prefix, and one
// lock's prefix never contains another lock's prefix.
func FuzzLockName(f *testing.F) {
	for _, s := range [][2]string{{"x", "x/y"}, {"a/b", "a%2Fb"}, {"a.b", "a/b"}, {"flow/extend", "flow"}, {"..", "."}, {"a-", "a-/b"}} {
		f.Add(s[0], s[1])
	}
	l, err := NewLayout("default")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, errA := ParseKey(a)
		kb, errB := ParseKey(b)
		if errA != nil || errB != nil {
			return
		}
		pa, pb := l.LockPrefix(ka), l.LockPrefix(kb)
		if a == b {
			if pa != pb {
				t.Fatalf("same key, different prefixes %q %q", pa, pb)
			}
			return
		}
		if pa == pb {
			t.Fatalf("keys %q and %q share prefix %q", a, b, pa)
		}
		if strings.HasPrefix(pa, pb) || strings.HasPrefix(pb, pa) {
			t.Fatalf("prefix %q and %q nest", pa, pb)
		}
		got, _, ok := l.ParseContender(l.ContenderKey(ka, 0x7))
		if !ok || got != ka {
			t.Fatalf("ParseContender(ContenderKey(%q)) = %q, %v", a, got, ok)
		}
	})
}

func TestParseAnyContender(t *testing.T) {
	l, _ := NewLayout("team-a")
	k, _ := ParseKey("deploy/prod")
	scope, got, pfx, ok := ParseAnyContender(l.ContenderKey(k, 0x1f))
	if !ok || scope != "team-a" || got != k || pfx != l.LockPrefix(k) {
		t.Errorf("ParseAnyContender = %q %v %q %v", scope, got, pfx, ok)
	}
	for _, bad := range []string{"/baton/v1/team-a", "/baton/v1/Bad Scope/locks/x/1f", "/other/team-a/locks/x/1f", "/baton/v1/team-a/locks/x/"} {
		if _, _, _, ok := ParseAnyContender(bad); ok {
			t.Errorf("ParseAnyContender(%q) ok", bad)
		}
	}
}

// TestBadCharacterIsNamed: an error names the character a person typed,
// not one byte of its UTF-8.
func TestBadCharacterIsNamed(t *testing.T) {
	for in, want := range map[string]string{
		"café":        `'é' (U+00E9) at byte 3`,
		"flow/日本":     `'日' (U+65E5) at byte 0`,
		"a b":         `' ' (U+0020) at byte 1`,
		"bad\xffbyte": "a byte that is not UTF-8 at byte 3",
	} {
		_, err := ParseKey(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseKey(%q) = %v; want it to name %s", in, err, want)
		}
	}
	if err := ValidatePrefix("tenant-ü"); err == nil || !strings.Contains(err.Error(), `'ü' (U+00FC)`) {
		t.Errorf("ValidatePrefix: %v", err)
	}
}

// TestSessionOf: the session's name is read back from each of its contender
// keys, as the sidecar's index of held keys reads it.
func TestSessionOf(t *testing.T) {
	l, err := NewLayout("s")
	if err != nil {
		t.Fatal(err)
	}
	k, _ := ParseKey("flow-1/plan")
	const lease = 0x3e73a220fbe5b203
	want := SessionName(lease)
	for _, key := range []string{l.ContenderKey(k, lease), l.UnitKey(k, lease, 42), l.DelayContenderKey(k, lease)} {
		if got := SessionOf(key); got != want {
			t.Errorf("SessionOf(%q) = %q, want %q", key, got, want)
		}
	}
	if SessionOf(l.ContenderKey(k, lease+1)) == want {
		t.Error("another session's key has this session's name")
	}
}
