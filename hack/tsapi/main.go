// Command tsapi writes the TypeScript types of the socket API, for the
// Node client, from its OpenAPI document (clients/go/lockapi/openapi.json):
// an interface for each object schema, a union for each enum, and the
// error codes and event names as constants. The Node client imports them,
// so that it never spells a field or a code by hand; the test beside this
// file fails when clients/node/src/api.ts is not what this writes
// (make node-api writes it).
//
//	go run ./hack/tsapi > clients/node/src/api.ts
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/baton-dev/baton/clients/go/lockapi"
)

func main() {
	if err := generate(os.Stdout, lockapi.OpenAPI()); err != nil {
		fmt.Fprintln(os.Stderr, "tsapi:", err)
		os.Exit(1)
	}
}

// schema is the part of a JSON schema the document uses.
type schema struct {
	Ref         string             `json:"$ref"`
	Type        any                `json:"type"` // a name, or a list of names
	Enum        []any              `json:"enum"`
	Const       any                `json:"const"`
	Items       *schema            `json:"items"`
	AnyOf       []*schema          `json:"anyOf"`
	OneOf       []*schema          `json:"oneOf"`
	Properties  map[string]*schema `json:"properties"`
	Required    []string           `json:"required"`
	Description string             `json:"description"`
}

// generate writes the TypeScript module of doc's schemas to w.
func generate(w io.Writer, doc []byte) error {
	var d struct {
		Components struct {
			Schemas map[string]*schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return fmt.Errorf("the OpenAPI document: %w", err)
	}
	schemas := d.Components.Schemas
	var b strings.Builder
	b.WriteString("// The socket API's bodies and codes, written by hack/tsapi from its OpenAPI\n" +
		"// document (clients/go/lockapi/openapi.json). Do not edit: make node-api.\n")
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range schemas {
			if n != "OpenAPIDocument" && !yield(n) {
				return
			}
		}
	})
	for _, name := range names {
		s := schemas[name]
		b.WriteString("\n")
		comment(&b, "", s.Description)
		if s.Properties == nil {
			fmt.Fprintf(&b, "export type %s = %s;\n", tsName(name), tsType(s))
			continue
		}
		fmt.Fprintf(&b, "export interface %s {\n", tsName(name))
		for _, p := range slices.Sorted(func(yield func(string) bool) {
			for n := range s.Properties {
				if !yield(n) {
					return
				}
			}
		}) {
			ps := s.Properties[p]
			comment(&b, "  ", ps.Description)
			opt := "?"
			if slices.Contains(s.Required, p) {
				opt = ""
			}
			fmt.Fprintf(&b, "  %s%s: %s;\n", p, opt, tsType(ps))
		}
		b.WriteString("}\n")
	}
	for _, c := range []struct{ name, schema, prop, doc string }{
		{"Codes", "Error", "code", "Every error code of the API: the code of a BatonError."},
		{"HoldEvents", "Event", "event", "The events of a hold stream."},
		{"LostReasons", "Event", "reason", "Why a held lock was lost, as a lost event says."},
	} {
		s := schemas[c.schema]
		if s == nil || s.Properties[c.prop] == nil || len(s.Properties[c.prop].Enum) == 0 {
			return fmt.Errorf("no enum at %s.%s", c.schema, c.prop)
		}
		fmt.Fprintf(&b, "\n/** %s */\nexport const %s = [\n", c.doc, c.name)
		for _, v := range s.Properties[c.prop].Enum {
			fmt.Fprintf(&b, "  %s,\n", literal(v))
		}
		b.WriteString("] as const;\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// tsName is the TypeScript name of the schema name: ErrorBody for Error,
// which would hide JavaScript's own.
func tsName(name string) string {
	if name == "Error" {
		return "ErrorBody"
	}
	return name
}

// comment writes text as a doc comment, indented by indent.
func comment(b *strings.Builder, indent, text string) {
	if text == "" {
		return
	}
	fmt.Fprintf(b, "%s/** %s */\n", indent, strings.ReplaceAll(text, "*/", "*\\/"))
}

// tsType is the TypeScript type of s.
func tsType(s *schema) string {
	switch {
	case s.Ref != "":
		return tsName(s.Ref[strings.LastIndex(s.Ref, "/")+1:])
	case s.Const != nil:
		return literal(s.Const)
	case len(s.Enum) > 0:
		var alts []string
		for _, v := range s.Enum {
			alts = append(alts, literal(v))
		}
		return strings.Join(alts, " | ")
	case len(s.AnyOf) > 0 || len(s.OneOf) > 0:
		var alts []string
		for _, a := range append(s.AnyOf, s.OneOf...) {
			alts = append(alts, tsType(a))
		}
		return strings.Join(alts, " | ")
	}
	var types []string
	switch t := s.Type.(type) {
	case string:
		types = []string{t}
	case []any:
		for _, v := range t {
			types = append(types, fmt.Sprint(v))
		}
	}
	var alts []string
	for _, t := range types {
		switch t {
		case "integer", "number":
			alts = append(alts, "number")
		case "array":
			alts = append(alts, tsType(s.Items)+"[]")
		case "object":
			alts = append(alts, "Record<string, unknown>")
		default: // string, boolean, null
			alts = append(alts, t)
		}
	}
	if len(alts) == 0 {
		return "unknown"
	}
	return strings.Join(alts, " | ")
}

// literal is v as a TypeScript literal.
func literal(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
