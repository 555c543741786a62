package lockapi

import (
	"bytes"
	_ "embed" // the document
)

//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3.1 document of the socket API, which the
// sidecar serves at GET /v1/openapi.json. A test calls every operation it
// documents and checks the answers against it.
func OpenAPI() []byte { return bytes.Clone(openAPI) }
