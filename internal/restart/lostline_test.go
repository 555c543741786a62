package restart

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/coordinator"
)

// TestLostLineAsJSON: a lost line written without reflection reads back
// as encoding/json's does, whatever the owner holds.
func TestLostLineAsJSON(t *testing.T) {
	at := time.Date(2026, 11, 26, 21, 0, 0, 123456789, time.FixedZone("x", 3600))
	for _, l := range []coordinator.LostLock{
		{Key: "flow-1/phase", Owner: "exec-1", Fence: 42, Reason: coordinator.Shutdown, At: at, ExpiresAt: at.Add(time.Hour)},
		{Key: "k", Owner: `ö"\<&>` + "\u2028", Fence: 1, Reason: coordinator.LeaseLost, At: at},
	} {
		line := appendLostLine(nil, l)
		var got, want stateLine
		if err := json.Unmarshal(line, &got); err != nil || !bytes.HasSuffix(line, []byte("\n")) {
			t.Fatalf("%s: %v", line, err)
		}
		ll := lostLine(l)
		b, _ := json.Marshal(stateLine{Lost: &ll})
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if got.Lost == nil || got.Lost.Key != want.Lost.Key || got.Lost.Owner != want.Lost.Owner || got.Lost.Fence != want.Lost.Fence ||
			got.Lost.Reason != want.Lost.Reason || !got.Lost.At.Equal(want.Lost.At) || !got.Lost.ExpiresAt.Equal(want.Lost.ExpiresAt) {
			t.Errorf("%s reads as %+v, encoding/json's %s as %+v", line, got.Lost, b, want.Lost)
		}
	}
}

// BenchmarkLostLine: the lines a sidecar writes for its locks as it shuts
// down, without reflection and with it.
func BenchmarkLostLine(b *testing.B) {
	l := coordinator.LostLock{Key: "sc12345", Owner: "o12", Fence: 123456, Reason: coordinator.Shutdown, At: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}
	b.Run("append", func(b *testing.B) {
		var line []byte
		for b.Loop() {
			line = appendLostLine(line[:0], l)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for b.Loop() {
			buf.Reset()
			ll := lostLine(l)
			_ = enc.Encode(stateLine{Lost: &ll})
		}
	})
}
