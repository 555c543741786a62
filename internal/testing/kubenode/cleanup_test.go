package kubenode

import (
	"slices"
	"testing"
)

func TestSplitRule(t *testing.T) {
	got, err := splitRule(`-s 10.244.0.2/32 -m comment --comment "name: \"baton-node\" id: \"b3\"" -j CNI-1032`)
	want := []string{"-s", "10.244.0.2/32", "-m", "comment", "--comment", `name: "baton-node" id: "b3"`, "-j", "CNI-1032"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("splitRule = %q, %v; want %q", got, err, want)
	}
	if _, err := splitRule(`--comment "open`); err == nil {
		t.Error("unbalanced quotes: no error")
	}
}
