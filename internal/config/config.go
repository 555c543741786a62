// Package config holds what the Config structs of Baton's packages share:
// errors that name the field they are about. A package's Validate says
// which field is wrong and why, in its own terms; the program that filled
// the struct (the baton command, from flags and environment variables)
// maps fields to what the person set, in one place.
package config

import "fmt"

// FieldError is a Config field whose value is out of range.
type FieldError struct {
	// Field is the field, qualified by its package as it is spelled in Go:
	// "lease.TTL", "coordinator.MaxWaiters".
	Field string
	// Err says what is wrong, without naming a flag.
	Err error
}

// Invalid returns a *FieldError about field; format and args make its
// message, and may wrap an error with %w.
func Invalid(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

func (e *FieldError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *FieldError) Unwrap() error { return e.Err }
