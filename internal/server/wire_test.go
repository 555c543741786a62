package server

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/coordinator"
)

func TestDecodeBody(t *testing.T) {
	tests := []struct {
		in   string
		want acquireBody
	}{
		{``, acquireBody{}},
		{`{}`, acquireBody{}},
		{`{"owner":"o","ttl":"5m","wait":"30s"}`, acquireBody{AcquireRequest: coordinator.AcquireRequest{Owner: "o", TTL: 5 * time.Minute, Wait: 30 * time.Second}, waitGiven: true}},
		{`{"ttl":90,"wait":0.5}`, acquireBody{AcquireRequest: coordinator.AcquireRequest{TTL: 90 * time.Second, Wait: 500 * time.Millisecond}, waitGiven: true}},
		{`{"wait":0}`, acquireBody{waitGiven: true}},
		{`{"wait":null,"value":"10.0.0.1"}`, acquireBody{AcquireRequest: coordinator.AcquireRequest{Value: "10.0.0.1"}, valueGiven: true}},
		{`{"owner":null,"ttl":null}`, acquireBody{}},
		{" \n{\"owner\":\"x\"}\n", acquireBody{AcquireRequest: coordinator.AcquireRequest{Owner: "x"}}},
		{`{"ttl":"1m","max_hold":"2h"}`, acquireBody{AcquireRequest: coordinator.AcquireRequest{TTL: time.Minute, MaxHold: 2 * time.Hour}}},
	}
	for _, tt := range tests {
		got, err := decodeBody(strings.NewReader(tt.in))
		if err != nil || got != tt.want {
			t.Errorf("decodeBody(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestDecodeBodyRefusesDuplicateFields(t *testing.T) {
	for _, in := range []string{`{"ttl":5,"ttl":6}`, `{"owner":"a","wait":1,"owner":"b"}`, `{"owner":"a","ow\u006eer":"b"}`} {
		_, err := decodeBody(strings.NewReader(in))
		var ae *apiError
		if !errors.As(err, &ae) || ae.code != lockapi.CodeInvalidRequest || !strings.Contains(ae.msg, "more than once") {
			t.Errorf("decodeBody(%q) = %v, want a 400 invalid_request naming the repeated field", in, err)
		}
	}
}

func TestDecodeBodyNamesUnknownFields(t *testing.T) {
	for in, name := range map[string]string{`{"owner":"a","tll":"5m"}`: `"tll"`, `{"OWNER":"a"}`: `"OWNER"`, `{"x":{"owner":"a"}}`: `"x"`} {
		_, err := decodeBody(strings.NewReader(in))
		var ae *apiError
		if !errors.As(err, &ae) || ae.code != lockapi.CodeInvalidRequest || !strings.Contains(ae.msg, "unknown field "+name) || !strings.Contains(ae.msg, "owner, ttl, wait, mode, limit, weight, lock_delay, once, if_done, if_failed, (on :hold and :campaign) max_hold and (on an election) value") {
			t.Errorf("decodeBody(%s) = %v, want a 400 naming the field %s and the known ones", in, err, name)
		}
	}
}

func TestDecodeBodyWantsAnObject(t *testing.T) {
	for _, in := range []string{`null`, ` null `, `[]`, `"x"`, `5`, `true`} {
		_, err := decodeBody(strings.NewReader(in))
		var ae *apiError
		if !errors.As(err, &ae) || ae.status != http.StatusBadRequest || ae.code != lockapi.CodeInvalidJSON {
			t.Errorf("decodeBody(%q) = %v, want a 400 invalid_json", in, err)
		}
	}
	for _, in := range []string{`{"ttl":0}`, `{"ttl":"0s"}`} {
		_, err := decodeBody(strings.NewReader(in))
		var ae *apiError
		if !errors.As(err, &ae) || ae.code != "invalid_ttl" {
			t.Errorf("decodeBody(%q) = %v, want a 400 invalid_ttl", in, err)
		}
	}
}

// FuzzAcquireJSON: decoding never panics, and what it accepts is sane.
func FuzzAcquireJSON(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"owner":"o","ttl":"5m","wait":"30s"}`, `{"ttl":1e308}`, `{"wait":-0}`,
		`{"ttl":"-1ns"}`, `{"owner":"\u0000"}`, `[`, `{"a":1}`, `{"ttl":"9223372036s"}`, `{} x`, `"str"`, `{"wait":NaN}`, `{"ttl":1,"ttl":2}`, `{"owner":"a",}`, `{"ow\u006eer":"b"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		b, err := decodeBody(strings.NewReader(in))
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != http.StatusBadRequest || ae.code == "" || ae.msg == "" {
				t.Fatalf("decodeBody(%q): error %v is not a 400 with a code and message", in, err)
			}
			return
		}
		if b.TTL < 0 || b.Wait < 0 {
			t.Fatalf("decodeBody(%q) accepted a negative duration: %+v", in, b)
		}
	})
}
