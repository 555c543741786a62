package restart

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/baton-dev/baton/internal/coordinator"
)

// appendLostLine appends l as the file's line {"lost":{...}}, as
// encoding/json writes it (but for HTML escapes, which JSON does not
// need), without reflection: a sidecar that shuts down holding 100 000
// locks writes one each, while its leases are revoked.
func appendLostLine(b []byte, l coordinator.LostLock) []byte {
	b = append(b, `{"lost":{"key":`...)
	b = appendJSONString(b, l.Key)
	b = append(b, `,"owner":`...)
	b = appendJSONString(b, l.Owner)
	b = append(b, `,"fence":`...)
	b = strconv.AppendInt(b, l.Fence, 10)
	b = append(b, `,"reason":`...)
	b = appendJSONString(b, string(l.Reason))
	b = append(b, `,"at":"`...)
	b = l.At.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if !l.ExpiresAt.IsZero() {
		b = append(b, `,"expires_at":"`...)
		b = l.ExpiresAt.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	return append(b, "}}\n"...)
}

// appendJSONString appends s as a JSON string: as it is when it needs no
// escape, else as encoding/json quotes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
