// Package tools pins the code generators the Makefile builds into ./bin
// (the tool directives of go.mod), apart from the project's own module.
package tools
