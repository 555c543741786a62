package mirror

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ObjectName derives a Lock's object name from its key: the key in
// lowercase with every run of other characters than [a-z0-9] turned into
// one '-', cut to 40 characters, then '-' and 8 hex digits of the key's
// SHA-256, so that keys differing only in case or punctuation get distinct
// names. The result is a DNS-1123 label.
func ObjectName(key string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(key) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= 40 {
			break
		}
	}
	sum := sha256.Sum256([]byte(key))
	stem := strings.TrimRight(b.String(), "-")
	if stem == "" {
		stem = "lock"
	}
	return stem + "-" + hex.EncodeToString(sum[:4])
}

// electionPrefix starts the name of an election's Lock object.
const electionPrefix = "election-"

// ElectionObjectName derives the name of an election's Lock object from
// its name: "election-" and ObjectName's, which names its Lease. A lock
// of the same name has another object: the hash at the end is of a key
// that the prefix is not part of.
func ElectionObjectName(name string) string { return electionPrefix + ObjectName(name) }

// LabelValue is the key in a form a label can hold, for `kubectl get locks
// -l baton.dev/key=...`: '/' becomes '.', which is the key itself when that
// is a valid label value; otherwise (too long) the object name.
func LabelValue(key string) string {
	v := strings.ReplaceAll(key, "/", ".")
	if len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	return ObjectName(key)
}
