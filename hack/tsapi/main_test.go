package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baton-dev/baton/clients/go/lockapi"
)

// The Node client's types are what the OpenAPI document says today.
func TestNodeClientTypesAreGenerated(t *testing.T) {
	var want bytes.Buffer
	if err := generate(&want, lockapi.OpenAPI()); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join("..", "..", "clients", "node", "src", "api.ts")
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("%s is not what hack/tsapi writes from the OpenAPI document: run make node-api", file)
	}
}

func TestGenerate(t *testing.T) {
	doc := `{"components": {"schemas": {
		"Error": {"type": "object", "required": ["code"], "properties": {
			"code": {"enum": ["a", "b"], "description": "the code"},
			"holder": {"$ref": "#/components/schemas/Holder"},
			"granted": {"const": false},
			"holders": {"type": "array", "items": {"$ref": "#/components/schemas/Holder"}},
			"n": {"type": "integer"}}},
		"Holder": {"type": "object", "properties": {"owner": {"type": "string"}}},
		"Event": {"type": "object", "properties": {"event": {"enum": ["granted"]}, "reason": {"enum": ["expired"]}}},
		"Duration": {"type": ["string", "number"]}}}}`
	var out bytes.Buffer
	if err := generate(&out, []byte(doc)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"export interface ErrorBody {\n  /** the code */\n  code: \"a\" | \"b\";\n  granted?: false;\n  holder?: Holder;\n  holders?: Holder[];\n  n?: number;\n}\n",
		"export type Duration = string | number;\n",
		"export const Codes = [\n  \"a\",\n  \"b\",\n] as const;\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("generated:\n%s\nlacks:\n%s", out.String(), want)
		}
	}
	if err := generate(&out, []byte(`{"components": {"schemas": {}}}`)); err == nil {
		t.Error("a document without the error codes generated types")
	}
}
