package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// membersByDecoder is members done by encoding/json's tokenizer, slowly:
// the reference FuzzMembers compares with.
func membersByDecoder(data []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var out []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprintf("%q=%s", t, v))
	}
	return out, nil
}

func membersOf(data []byte) ([]string, error) {
	var out []string
	err := members(data, func(name string, value []byte) error {
		out = append(out, fmt.Sprintf("%q=%s", name, value))
		return nil
	})
	return out, err
}

func TestMembers(t *testing.T) {
	for _, in := range []string{
		`{}`, ` { } `, `{"a":1}`, "{ \"a\" :\t1 ,\n\"b\" : \"x\" }",
		`{"a":{"b":[1,{"c":"}"}]},"d":[]}`, `{"q\"}":"\\","e":"\u00e9"}`,
		`{"ow\u006eer":"x"}`, `{"a":-1.5e3,"b":true,"c":null}`, `{"s":"a\"b,}"}`,
	} {
		got, err := membersOf([]byte(strings.TrimSpace(in)))
		want, werr := membersByDecoder([]byte(in))
		if err != nil || werr != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("members(%s) = %v, %v; want %v, %v", in, got, err, want, werr)
		}
	}
}

// FuzzMembers: on every valid JSON object, members sees what encoding/json
// sees.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":{"b":[1,"]"]},"c":"\""}`, `{"\u0061":1}`, `{"a" : [ ] , "b":{}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		data := bytes.TrimSpace([]byte(in))
		if len(data) == 0 || data[0] != '{' || !json.Valid(data) {
			return
		}
		got, err := membersOf(data)
		want, werr := membersByDecoder(data)
		if err != nil || werr != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("members(%s) = %v, %v; want %v, %v", in, got, err, want, werr)
		}
	})
}
