package server

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestDecodeBody(t *testing.T) {
	tests := []struct {
		in   string
		want acquireBody
	}{
		{``, acquireBody{}},
		{`{}`, acquireBody{}},
		{`{"owner":"o","ttl":"5m","wait":"30s"}`, acquireBody{Owner: "o", TTL: 5 * time.Minute, Wait: 30 * time.Second}},
		{`{"ttl":90,"wait":0.5}`, acquireBody{TTL: 90 * time.Second, Wait: 500 * time.Millisecond}},
		{`{"wait":0}`, acquireBody{}},
		{`{"owner":null,"ttl":null}`, acquireBody{}},
		{" \n{\"owner\":\"x\"}\n", acquireBody{Owner: "x"}},
	}
	for _, tt := range tests {
		got, err := decodeBody(strings.NewReader(tt.in))
		if err != nil || got != tt.want {
			t.Errorf("decodeBody(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

// FuzzAcquireJSON: decoding never panics, and what it accepts is sane.
func FuzzAcquireJSON(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"owner":"o","ttl":"5m","wait":"30s"}`, `{"ttl":1e308}`, `{"wait":-0}`,
		`{"ttl":"-1ns"}`, `{"owner":"\u0000"}`, `[`, `{"a":1}`, `{"ttl":"9223372036s"}`, `{} x`, `"str"`, `{"wait":NaN}`} {
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
