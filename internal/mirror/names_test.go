package mirror

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestObjectNames(t *testing.T) {
	seen := map[string]string{}
	for _, key := range []string{
		"deploy/prod", "Deploy/Prod", "deploy.prod", "deploy_prod", "a", "_", "...",
		"tenant-42/pipeline/nightly", strings.Repeat("x", 200), strings.Repeat("ab/", 50) + "c",
	} {
		name := ObjectName(key)
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Errorf("ObjectName(%q) = %q: %v", key, name, errs)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("keys %q and %q share the name %q", key, other, name)
		}
		seen[name] = key
		if ObjectName(key) != name {
			t.Errorf("ObjectName(%q) is not stable", key)
		}
		if errs := validation.IsValidLabelValue(LabelValue(key)); len(errs) > 0 {
			t.Errorf("LabelValue(%q) = %q: %v", key, LabelValue(key), errs)
		}
	}
	if got := ObjectName("tenant-42/pipeline/nightly"); !strings.HasPrefix(got, "tenant-42-pipeline-nightly-") {
		t.Errorf("ObjectName keeps the key readable: %q", got)
	}
	if got := LabelValue("tenant-42/pipeline/nightly"); got != "tenant-42.pipeline.nightly" {
		t.Errorf("LabelValue = %q", got)
	}
}
