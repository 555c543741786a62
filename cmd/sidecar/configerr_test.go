package main

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/config"
)

// TestEveryConfigFieldHasItsFlag reads the fields that the core packages'
// Validate methods name (config.Invalid's first argument) and checks that
// flagOf maps each to a flag, but for the fields no flag sets; and that
// flagOf names no field that Validate never reports.
func TestEveryConfigFieldHasItsFlag(t *testing.T) {
	unset := []string{ // fields no flag of baton sets
		"lease.RetryMin", "lease.MaxLeases", "coordinator.EndedRetention", "coordinator.Space",
		"server.MaxBodyBytes", "server.ReadHeaderTimeout", "server.IdleTimeout", "server.BodyTimeout", "server.HeartbeatInterval",
		"embedetcd.PeerURL", "embedetcd.StartTimeout", "embedetcd.TLS", "mirror.RequestTimeout", "mirror.RetryInterval",
		"pki.CommonName", "pki.Usage", "pki.DNSNames", "pki.Validity", "access.Resync",
		"highwater.Interval", "highwater.SaveEvery", "highwater.RequestTimeout", "etcdmaint.Timeout", "etcdmaint.DefragTimeout",
		"etcdmembers.Timeout", "etcdbackup.Timeout", "etcdbackup.Look",
	}
	files, err := filepath.Glob("../../internal/*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	reported := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Invalid" || len(call.Args) == 0 {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "config" {
				return true
			}
			switch a := call.Args[0].(type) {
			case *ast.BasicLit:
				v, _ := strconv.Unquote(a.Value)
				reported[v] = true
			case *ast.BinaryExpr: // "embedetcd."+f.field: the fields are listed in the same call's loop
				if lit, ok := a.X.(*ast.BasicLit); ok {
					v, _ := strconv.Unquote(lit.Value)
					reported[v+"ClientURL"], reported[v+"PeerURL"] = true, true
				}
			}
			return true
		})
	}
	if len(reported) < 20 {
		t.Fatalf("found only %d fields reported by Validate: %v", len(reported), reported)
	}
	for field := range reported {
		if flagOf(field) == "" && !slices.Contains(unset, field) {
			t.Errorf("Validate reports %s, which flagOf maps to no flag", field)
		}
	}
	for _, field := range unset {
		if !reported[field] {
			t.Errorf("%s is listed as set by no flag, but no Validate reports it", field)
		}
	}

	err = flagError(config.Invalid("lease.KeysPerLease", "keys per lease %d: must be at least 1", 0))
	if err.Error() != "--keys-per-lease: keys per lease 0: must be at least 1" {
		t.Errorf("flagError: %q", err)
	}
	if err := flagError(config.Invalid("server.IdleTimeout", "idle timeout 0s: must be positive")); err.Error() != "configuration (server.IdleTimeout): idle timeout 0s: must be positive" {
		t.Errorf("flagError of a field no flag sets: %q", err)
	}
	plain := errors.New("plain")
	if err := flagError(plain); err != plain { //nolint:errorlint // the very error, unwrapped, is what is checked
		t.Error("flagError changed an error about no field")
	}
}
