package policy

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	rule := func(sas, keys []string) Document {
		return Document{Policies: []Policy{{Name: "p", Rules: []Rule{{ServiceAccounts: sas, Keys: keys}}}}}
	}
	for _, tt := range []struct {
		name string
		doc  Document
		want string // "" when valid
	}{
		{"empty", Document{}, ""},
		{"any", rule([]string{"*"}, []string{"*"}), ""},
		{"named", rule([]string{"runner", "web.v2"}, []string{"tf/", "deploy-"}), ""},
		{"no name", Document{Policies: []Policy{{Rules: rule([]string{"*"}, []string{"*"}).Policies[0].Rules}}}, "a policy has no name"},
		{"twice", Document{Policies: []Policy{rule([]string{"*"}, []string{"*"}).Policies[0], rule([]string{"*"}, []string{"*"}).Policies[0]}}, `two policies are named "p"`},
		{"no rules", Document{Policies: []Policy{{Name: "p"}}}, `policy "p" has no rules`},
		{"no accounts", rule(nil, []string{"*"}), "serviceAccounts is empty"},
		{"bad account", rule([]string{"Runner"}, []string{"*"}), `"Runner" is not a ServiceAccount name`},
		{"no keys", rule([]string{"*"}, nil), "keys is empty"},
		{"empty key", rule([]string{"*"}, []string{""}), `an empty prefix; write "*"`},
		{"bad key", rule([]string{"*"}, []string{"a b"}), `prefix "a b" has ' '`},
	} {
		err := tt.doc.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v; want %q", tt.name, err, tt.want)
		}
	}
	if _, err := Decode([]byte(`{"policies":[],"extra":1}`)); err == nil || !strings.Contains(err.Error(), `unknown field "extra"`) {
		t.Errorf("unknown field: %v", err)
	}
	d := rule([]string{"runner"}, []string{"tf/"})
	back, err := Decode(d.Encode())
	if err != nil || string(back.Encode()) != string(d.Encode()) {
		t.Errorf("round trip: %v %s", err, back.Encode())
	}
}

func TestCheck(t *testing.T) {
	doc := Document{Policies: []Policy{
		{Name: "pipelines", Rules: []Rule{
			{ServiceAccounts: []string{"runner"}, Keys: []string{"tf/", "deploy-"}},
			{ServiceAccounts: []string{"oncall"}, Keys: []string{"*"}, ForceRelease: true},
		}},
		{Name: "shared", Rules: []Rule{{ServiceAccounts: []string{"*"}, Keys: []string{"shared/"}}}},
	}}
	for _, tt := range []struct {
		doc    Document
		a      Action
		sa     string
		key    string
		denied string // "" when allowed
	}{
		{Document{}, Lock, "", "anything", ""},
		{Document{}, ForceRelease, "oncall", "x", "no LockPolicy allowing it"},
		{Document{}, ForceRelease, "", "x", "start it with --policy-file FILE"},
		{doc, Lock, "runner", "tf/prod", ""},
		{doc, Lock, "runner", "deploy-eu", ""},
		{doc, Lock, "runner", "shared/cache", ""},
		{doc, Lock, "runner", "tf", `only keys starting with "tf/", "deploy-" (LockPolicy pipelines rule 1); "shared/" (LockPolicy shared rule 1)`},
		{doc, Lock, "web", "shared/x", ""},
		{doc, Lock, "web", "tf/prod", `"web" may not lock "tf/prod"`},
		{doc, Lock, "", "tf/prod", `"(none)" may not lock`},
		{doc, Lock, "oncall", "anything", ""},
		{doc, ForceRelease, "oncall", "tf/prod", ""},
		{doc, ForceRelease, "runner", "tf/prod", `no rule of this namespace's LockPolicies (pipelines, shared) lets it force release any key`},
	} {
		err := tt.doc.Check(tt.a, tt.sa, tt.key)
		if tt.denied == "" {
			if err != nil {
				t.Errorf("%s %s %s: %v", tt.sa, tt.a, tt.key, err)
			}
			continue
		}
		var f *Forbidden
		if !errors.As(err, &f) || !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), tt.denied) || f.Key != tt.key || f.Action != tt.a {
			t.Errorf("%s %s %s: %v; want a refusal saying %q", tt.sa, tt.a, tt.key, err, tt.denied)
		}
	}
}

func TestGuard(t *testing.T) {
	changes := 0
	g := NewGuard("runner", "test source", slog.New(slog.NewTextHandler(io.Discard, nil)), func() { changes++ })
	if err := g.Check(Lock, "x"); !errors.Is(err, ErrNoPolicy) || !strings.Contains(err.Error(), "test source was not read yet") {
		t.Errorf("before the first read: %v", err)
	}
	if g.Ready() == nil {
		t.Error("ready before the first read")
	}
	g.SetJSON(nil, "1")
	if g.Ready() != nil || g.Check(Lock, "x") != nil || !errors.Is(g.Check(ForceRelease, "x"), ErrForbidden) {
		t.Errorf("the default: ready %v, lock %v, force %v", g.Ready(), g.Check(Lock, "x"), g.Check(ForceRelease, "x"))
	}
	g.SetJSON([]byte(`{"policies":[{"name":"p","rules":[{"serviceAccounts":["runner"],"keys":["a/"]}]}]}`), "2")
	if g.Check(Lock, "a/1") != nil || !errors.Is(g.Check(Lock, "b"), ErrForbidden) {
		t.Errorf("policy p: %v %v", g.Check(Lock, "a/1"), g.Check(Lock, "b"))
	}
	g.SetJSON([]byte(`{"policies":[{"name":"p","rules":[{"serviceAccounts":["runner"],"keys":["a/"]}]}]}`), "3")
	if changes != 2 {
		t.Errorf("%d changes counted; the same policy again is no change", changes)
	}
	g.SetJSON([]byte(`{"policies":`), "4")
	if err := g.Check(Lock, "a/1"); !errors.Is(err, ErrNoPolicy) || !strings.Contains(err.Error(), "test source (version 4)") {
		t.Errorf("an invalid document does not fail closed: %v", err)
	}
	if g.Ready() == nil || changes != 3 {
		t.Errorf("ready %v with an invalid document, %d changes", g.Ready(), changes)
	}
}
