// Package version says which Baton this is: what `baton version` prints
// and the baton_build_info metric exports.
package version

import (
	"runtime"
	"runtime/debug"

	etcdversion "go.etcd.io/etcd/api/v3/version"
)

// Set at build time by the Makefile:
//
//	-ldflags "-X github.com/baton-dev/baton/internal/version.version=v0.1.0
//	          -X github.com/baton-dev/baton/internal/version.commit=3a0e711"
//
// A plain `go build` leaves them empty: Get then reads the commit Go
// recorded from git, and calls the version "dev".
var (
	version string
	commit  string
)

// Info describes this build.
type Info struct {
	// Version is the release, e.g. v0.1.0, or "dev" for an untagged build.
	Version string `json:"version"`
	// Commit is the git commit the binary was built from ("unknown" when
	// neither the Makefile nor Go recorded it).
	Commit string `json:"commit"`
	// Go is the Go release that built it.
	Go string `json:"go"`
	// Etcd is the version of the etcd client and embedded server it links.
	Etcd string `json:"etcd"`
}

// Get returns this build's Info.
func Get() Info {
	i := Info{Version: version, Commit: commit, Go: runtime.Version(), Etcd: etcdversion.Version}
	if i.Version == "" {
		i.Version = "dev"
	}
	if i.Commit == "" {
		i.Commit = "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" && len(s.Value) >= 7 {
					i.Commit = s.Value[:7]
				}
			}
		}
	}
	return i
}

// String is the one line `baton version` prints.
func (i Info) String() string {
	return "baton " + i.Version + " (commit " + i.Commit + ", " + i.Go + ", etcd " + i.Etcd + ")"
}
