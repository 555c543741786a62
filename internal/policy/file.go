package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"go.yaml.in/yaml/v3"
)

// FollowFile keeps g set to the Document in the file at path (YAML or
// JSON), reading it again whenever its size or modification time changes,
// looked at every interval, until ctx ends. A file that cannot be read or
// holds an invalid document leaves no policy in force. A mounted ConfigMap
// works: its updates replace the file the path leads to.
func FollowFile(ctx context.Context, path string, g *Guard, interval time.Duration) {
	var seen os.FileInfo
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		fi, err := os.Stat(path)
		switch {
		case err != nil:
			g.Fail(fmt.Errorf("policy file: %w", err))
			seen = nil
		case seen == nil || fi.Size() != seen.Size() || !fi.ModTime().Equal(seen.ModTime()):
			seen = fi
			g.setFile(path, fi.ModTime())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ReadFile reads and validates the Document in the file at path.
func ReadFile(path string) (Document, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Document{}, fmt.Errorf("policy file: %w", err)
	}
	// YAML, of which JSON is a part, read as JSON is: strictly.
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return Document{}, fmt.Errorf("policy file %s: %w: %w", path, ErrInvalid, err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		return Document{}, fmt.Errorf("policy file %s: %w: %w", path, ErrInvalid, err)
	}
	d, err := Decode(j)
	if err != nil {
		return Document{}, fmt.Errorf("policy file %s: %w", path, err)
	}
	return d, nil
}

func (g *Guard) setFile(path string, mod time.Time) {
	d, err := ReadFile(path)
	if err != nil {
		g.Fail(err)
		return
	}
	g.Set(d, mod.UTC().Format(time.RFC3339Nano))
}
