package server

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/baton-dev/baton/clients/go/lockapi"
)

// members calls visit with the name and raw value of each member of the
// JSON object data, in order. data must be one valid JSON object
// (json.Valid, first byte '{'): members then only has to find where each
// name and value ends, which a valid document makes unambiguous.
func members(data []byte, visit func(name string, value []byte) error) error {
	i := skipSpace(data, 1)
	if data[i] == '}' {
		return nil
	}
	for {
		end := stringEnd(data, i)
		name, err := unquote(data[i:end])
		if err != nil {
			return err
		}
		i = skipSpace(data, end)
		i = skipSpace(data, i+1) // past ':'
		end = valueEnd(data, i)
		if err := visit(name, data[i:end]); err != nil {
			return err
		}
		i = skipSpace(data, end)
		if data[i] == '}' {
			return nil
		}
		i = skipSpace(data, i+1) // past ','
	}
}

// unquote returns the string a JSON string literal stands for; only one
// with escapes or non-ASCII bytes (invalid UTF-8 becomes U+FFFD) needs
// decoding.
func unquote(lit []byte) (string, error) {
	for _, c := range lit {
		if c == '\\' || c >= utf8.RuneSelf {
			var s string
			if err := json.Unmarshal(lit, &s); err != nil {
				return "", badRequest(lockapi.CodeInvalidJSON, fmt.Sprintf("field name %s: %v", clip(lit), err))
			}
			return s, nil
		}
	}
	return string(lit[1 : len(lit)-1]), nil
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// stringEnd returns the index just past the string literal starting at i.
func stringEnd(data []byte, i int) int {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(data)
}

// valueEnd returns the index just past the value starting at i.
func valueEnd(data []byte, i int) int {
	switch data[i] {
	case '"':
		return stringEnd(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				j = stringEnd(data, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(data)
	}
	for j := i; j < len(data); j++ {
		switch data[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return j
		}
	}
	return len(data)
}
