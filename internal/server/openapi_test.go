package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/baton-dev/baton/clients/go/lockapi"
)

// openAPIDoc is the parts of the OpenAPI document the test reads.
type openAPIDoc struct {
	OpenAPI string                                `json:"openapi"`
	Paths   map[string]map[string]json.RawMessage `json:"paths"`
	Comps   struct {
		Responses map[string]openAPIResponse `json:"responses"`
	} `json:"components"`
}

type openAPIOp struct {
	OperationID string                     `json:"operationId"`
	Responses   map[string]openAPIResponse `json:"responses"`
}

type openAPIResponse struct {
	Ref     string `json:"$ref"`
	Content map[string]struct {
		Schema struct {
			Ref string `json:"$ref"`
		} `json:"schema"`
	} `json:"content"`
}

// apiCall is one call of a documented operation, and the status it must get.
type apiCall struct {
	op, method, path, body string
	status                 int
	via                    *api   // the sidecar to call; the first when nil
	before                 func() // what the call needs done first
}

// TestOpenAPI calls every operation of the OpenAPI document the sidecar
// serves, and checks each answer's status is documented for the operation
// and its body matches the documented schema (each line of a hold stream).
func TestOpenAPI(t *testing.T) {
	a, b := newAPI(t, "pod-a", operators(t)), newAPI(t, "pod-b", operators(t))
	served := a.do("GET", "/v1/openapi.json", "")
	if served.status != http.StatusOK || served.raw != string(lockapi.OpenAPI()) {
		t.Fatalf("GET /v1/openapi.json: %d, not the document", served.status)
	}
	a.do("POST", "/v1/openapi.json", "{}").expect(t, http.StatusMethodNotAllowed, lockapi.CodeMethodNotAllowed)
	var doc openAPIDoc
	if err := json.Unmarshal(lockapi.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	schemas := compileSchemas(t)
	// Run-once records outlive the test's sidecars: a key of this run's own.
	once := fmt.Sprintf("/v1/locks/oa/once-%d", time.Now().UnixNano())
	calls := []apiCall{
		{op: "acquireLock", method: "POST", path: "/v1/locks/oa/k", body: `{"owner":"o1","ttl":"1m"}`, status: 200},
		{op: "acquireLock", method: "POST", path: "/v1/locks/oa/k", body: `{"owner":"o2"}`, status: 409, via: b},
		{op: "acquireLock", method: "POST", path: "/v1/locks/oa/k", body: `{"ttl":"-1s"}`, status: 400},
		{op: "getLock", method: "GET", path: "/v1/locks/oa/k", status: 200},
		{op: "extendLock", method: "POST", path: "/v1/locks/oa/k:extend", body: `{"owner":"o1","ttl":"2m"}`, status: 200},
		{op: "extendLock", method: "POST", path: "/v1/locks/oa/free:extend", body: `{"owner":"o1"}`, status: 404},
		{op: "listLocks", method: "GET", path: "/v1/locks?prefix=oa/", status: 200},
		{op: "releaseLock", method: "DELETE", path: "/v1/locks/oa/k?owner=o2", status: 403},
		{op: "releaseLock", method: "DELETE", path: "/v1/locks/oa/k?owner=o1", status: 200},
		{op: "releaseLock", method: "DELETE", path: "/v1/locks/oa/k?owner=o1", status: 404},
		{op: "acquireLock", method: "POST", path: "/v1/locks/oa/f", body: `{"owner":"o3"}`, status: 200, via: b},
		{op: "releaseLock", method: "DELETE", path: "/v1/locks/oa/f?force=true&by=test", status: 200},
		{op: "holdLock", method: "POST", path: "/v1/locks/oa/h:hold", body: `{"owner":"o4"}`, status: 200},
		{op: "acquireLock", method: "POST", path: "/v1/locks/oa/sem", body: `{"owner":"s1","limit":3,"weight":2}`, status: 200},
		{op: "acquireLock", method: "POST", path: "/v1/locks/oa/sem", body: `{"owner":"s2","limit":3}`, status: 200, via: b},
		{op: "acquireLock", method: "POST", path: "/v1/locks/oa/sem", body: `{"owner":"s3","limit":3}`, status: 409},
		{op: "acquireLock", method: "POST", path: "/v1/locks/oa/sem", body: `{"owner":"s3","limit":4}`, status: 409, via: b},
		{op: "acquireLock", method: "POST", path: "/v1/locks/oa/sem", body: `{"owner":"s3","limit":0}`, status: 400},
		{op: "getLock", method: "GET", path: "/v1/locks/oa/sem", status: 200},
		{op: "acquireLock", method: "POST", path: "/v1/locks/oa/rw", body: `{"owner":"r1","mode":"read"}`, status: 200},
		{op: "acquireLock", method: "POST", path: "/v1/locks/oa/rw", body: `{"owner":"r2","mode":"read"}`, status: 200, via: b},
		{op: "listLocks", method: "GET", path: "/v1/locks?prefix=oa/", status: 200},
		{op: "releaseLock", method: "DELETE", path: "/v1/locks/oa/rw?force=true", status: 400},
		{op: "acquireLock", method: "POST", path: once, body: `{"owner":"m1","once":true}`, status: 200},
		{op: "getRun", method: "GET", path: once + ":done", status: 404},
		{op: "finishRun", method: "POST", path: once + ":done", body: `{"owner":"m2","ok":true}`, status: 403},
		{op: "finishRun", method: "POST", path: once + ":done", body: `{"owner":"m1"}`, status: 400},
		{op: "finishRun", method: "POST", path: once + ":done", body: `{"owner":"m1","ok":true,"result":"v42"}`, status: 200},
		{op: "finishRun", method: "POST", path: once + ":done", body: `{"owner":"m1","ok":true}`, status: 404},
		{op: "getRun", method: "GET", path: once + ":done", status: 200},
		{op: "acquireLock", method: "POST", path: once, body: `{"owner":"m3","once":true}`, status: 409, via: b},
		{op: "watchLock", method: "GET", path: "/v1/locks/oa/sem:watch", status: 200},
		{op: "watchLock", method: "GET", path: "/v1/locks/oa/free:watch", status: 200},
		{op: "watchLocks", method: "GET", path: "/v1/locks:watch?prefix=oa/", status: 200},
		{op: "watchLocks", method: "GET", path: "/v1/locks:watch?prefix=a%20b", status: 400},
		{op: "acquireLock", method: "POST", path: "/v1/locks/oa/q", body: `{"owner":"q1","ttl":"1m"}`, status: 200},
		{op: "getLock", method: "GET", path: "/v1/locks/oa/q", status: 200, before: func() { // with a waiter
			b.openHold("oa/q", `{"owner":"q2","wait":"1m"}`)
			waitUntil(t, 10*time.Second, "q2 waiting", func() bool { return strings.Contains(a.do("GET", "/v1/locks/oa/q", "").raw, `"q2"`) })
		}},
		{op: "getLock", method: "GET", path: "/v1/locks/oa/q", status: 200, via: b, before: func() { // its waiter's process, and one queued behind it
			b.openHold("oa/q", `{"owner":"q3","wait":"1m"}`)
			waitUntil(t, 10*time.Second, "q3 queued behind q2", func() bool {
				raw := b.do("GET", "/v1/locks/oa/q", "").raw
				return strings.Contains(raw, `"queued_here":[{"owner":"q3"`) && strings.Contains(raw, `"process":{"pid":`)
			})
		}},
		{op: "campaign", method: "POST", path: "/v1/elections/oa/e:campaign", body: `{"owner":"c1","value":"10.0.0.1"}`, status: 200},
		{op: "campaign", method: "POST", path: "/v1/elections/oa/e:campaign", body: `{"owner":"c2","wait":0}`, status: 409, via: b},
		{op: "campaign", method: "POST", path: "/v1/elections/oa/e:campaign", body: `{"limit":2}`, status: 400},
		{op: "getElection", method: "GET", path: "/v1/elections/oa/e", status: 200, via: b},
		{op: "listElections", method: "GET", path: "/v1/elections?prefix=oa/", status: 200},
		{op: "observeElection", method: "GET", path: "/v1/elections/oa/e:observe", status: 200, via: b},
		{op: "observeElections", method: "GET", path: "/v1/elections:observe?prefix=oa/", status: 200},
		{op: "proclaim", method: "POST", path: "/v1/elections/oa/p:proclaim", body: `{"owner":"p1","value":"v2"}`, status: 200, before: func() {
			a.openStream("/v1/elections/oa/p:campaign", `{"owner":"p1","value":"v1"}`).next()
		}},
		{op: "proclaim", method: "POST", path: "/v1/elections/oa/p:proclaim", body: `{"owner":"p2","value":"v2"}`, status: 403},
		{op: "proclaim", method: "POST", path: "/v1/elections/oa/free:proclaim", body: `{"owner":"p1","value":"v"}`, status: 404},
		{op: "proclaim", method: "POST", path: "/v1/elections/oa/p:proclaim", body: `{"owner":"p1","value":5}`, status: 400},
		{op: "resignElection", method: "DELETE", path: "/v1/elections/oa/p?owner=p1", status: 200},
		{op: "resignElection", method: "DELETE", path: "/v1/elections/oa/p?owner=p1", status: 404},
		{op: "getOpenAPI", method: "GET", path: "/v1/openapi.json", status: 200},
		{op: "healthz", method: "GET", path: "/healthz", status: 200},
		{op: "readyz", method: "GET", path: "/readyz", status: 200},
	}
	called := map[string]bool{}
	for _, c := range calls {
		op := doc.operation(t, c.method, c.path)
		if op.OperationID != c.op {
			t.Fatalf("%s %s is operation %q in the document, not %q", c.method, c.path, op.OperationID, c.op)
		}
		called[c.op] = true
		if c.before != nil {
			c.before()
		}
		via := c.via
		if via == nil {
			via = a
		}
		status, ctype, body := via.call(t, c.method, c.path, c.body)
		if status != c.status {
			t.Errorf("%s %s: %d, want %d: %s", c.method, c.path, status, c.status, body)
			continue
		}
		resp, ok := op.Responses[strconv.Itoa(status)]
		if !ok {
			t.Errorf("%s %s: status %d is not documented", c.method, c.path, status)
			continue
		}
		if resp.Ref != "" {
			resp = doc.Comps.Responses[strings.TrimPrefix(resp.Ref, "#/components/responses/")]
		}
		content, ok := resp.Content[ctype]
		if !ok {
			t.Errorf("%s %s: %d answered %s, which is not documented", c.method, c.path, status, ctype)
			continue
		}
		sch := schemas(content.Schema.Ref)
		for _, line := range documents(ctype, body) {
			v, err := jsonschema.UnmarshalJSON(strings.NewReader(line))
			if err == nil {
				err = sch.Validate(v)
			}
			if err != nil {
				t.Errorf("%s %s: %d %s does not match %s: %v", c.method, c.path, status, line, content.Schema.Ref, err)
			}
		}
	}
	var ops []string
	for _, methods := range doc.Paths {
		for method, raw := range methods {
			if method == "parameters" {
				continue
			}
			var op openAPIOp
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			if !called[op.OperationID] {
				ops = append(ops, op.OperationID)
			}
		}
	}
	sort.Strings(ops)
	if len(ops) > 0 {
		t.Errorf("documented operations never called: %v", ops)
	}
}

// compileSchemas returns the document's schemas by reference.
func compileSchemas(t *testing.T) func(ref string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(lockapi.OpenAPI()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("openapi.json", doc); err != nil {
		t.Fatal(err)
	}
	return func(ref string) *jsonschema.Schema {
		t.Helper()
		sch, err := c.Compile("openapi.json" + ref)
		if err != nil {
			t.Fatalf("schema %q: %v", ref, err)
		}
		return sch
	}
}

// operation returns the document's operation that serves method on path,
// as the server routes: a key runs up to a custom method (":extend").
func (d openAPIDoc) operation(t *testing.T, method, path string) openAPIOp {
	t.Helper()
	path, _, _ = strings.Cut(path, "?")
	for tmpl, methods := range d.Paths {
		pattern := strings.NewReplacer(`\{key\}`, `[^:]+`, `\{name\}`, `[^:]+`).Replace(regexp.QuoteMeta(tmpl))
		re := regexp.MustCompile("^" + pattern + "$")
		raw, ok := methods[strings.ToLower(method)]
		if !ok || !re.MatchString(path) {
			continue
		}
		var op openAPIOp
		if err := json.Unmarshal(raw, &op); err != nil {
			t.Fatal(err)
		}
		return op
	}
	t.Fatalf("%s %s is not in the document", method, path)
	return openAPIOp{}
}

// call makes one call and returns the status, content type and body; a
// hold stream is read up to its grant, a watch up to its first sync, then
// closed.
func (a *api) call(t *testing.T, method, path, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://baton"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	ctype := resp.Header.Get("Content-Type")
	if ctype != "application/x-ndjson" {
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, ctype, string(raw)
	}
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), `"event":"granted"`) || strings.Contains(sc.Text(), `"event":"synced"`) {
			return resp.StatusCode, ctype, strings.Join(lines, "\n")
		}
	}
	t.Errorf("%s %s: the stream ended before its grant or sync: %q", method, path, lines)
	return resp.StatusCode, ctype, strings.Join(lines, "\n")
}

// documents splits a body into its JSON documents: one, or a line each.
func documents(ctype, body string) []string {
	if ctype != "application/x-ndjson" {
		return []string{body}
	}
	return strings.Split(body, "\n")
}
