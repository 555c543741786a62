package mirror

import (
	"slices"
	"testing"
	"time"
)

func TestConfig(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Config){
		"bad scope":    func(c *Config) { c.Scopes = []string{"a/b"} },
		"no retention": func(c *Config) { c.FreeRetention = 0 },
		"no timeout":   func(c *Config) { c.RequestTimeout = 0 },
		"no retry":     func(c *Config) { c.RetryInterval = -time.Second },
	} {
		c := Default()
		mod(&c)
		if c.Validate() == nil {
			t.Errorf("%s: Validate() = nil", name)
		}
	}
	c := Default()
	if got := c.prefixes(); !slices.Equal(got, []string{"/baton/v1/"}) || !c.inScope("anything") {
		t.Errorf("all scopes: prefixes %v", got)
	}
	c.Scopes = []string{"team-a", "team-b"}
	if got := c.prefixes(); !slices.Equal(got, []string{"/baton/v1/team-a/locks/", "/baton/v1/team-a/elections/", "/baton/v1/team-b/locks/", "/baton/v1/team-b/elections/"}) || !c.inScope("team-b") || c.inScope("team-c") {
		t.Errorf("two scopes: prefixes %v", got)
	}
}
