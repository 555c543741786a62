package keyspace

import "fmt"

// ClaimError is a claim that no lock can grant: Field is the request's
// field at fault ("mode", "limit" or "weight"), Msg says why in terms of
// the claim, not of a flag or a JSON field.
type ClaimError struct {
	Field string
	Msg   string
}

func (e *ClaimError) Error() string { return e.Field + ": " + e.Msg }

// Normal checks a claim and returns its one form: a semaphore's weight is
// at least 1, and a semaphore of one unit is the mutex. Every front end
// (the socket API through the coordinator, baton run's flags) checks a
// claim here, so that each refuses what the others refuse, in the same
// words.
func (c Claim) Normal() (Claim, error) {
	bad := func(field, format string, args ...any) (Claim, error) {
		return Claim{}, &ClaimError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Mode != Exclusive && c.Mode != Read:
		return bad("mode", "%q is not a mode; use read or write (the default)", c.Mode)
	case c.Limit < 0:
		return bad("limit", "%d is negative; a semaphore has 1 to %d units", c.Limit, MaxLimit)
	case c.Limit > MaxLimit:
		return bad("limit", "%d is more than %d units; a semaphore that large is a queue, not a lock", c.Limit, MaxLimit)
	case c.Weight < 0:
		return bad("weight", "%d is negative; a weight is 1 to the limit", c.Weight)
	case c.Weight > 0 && c.Limit == 0:
		return bad("weight", "applies to semaphores: give the limit too")
	case c.Weight > c.Limit:
		return bad("weight", "%d is more than the limit of %d units: it could never be granted", c.Weight, c.Limit)
	case c.Mode == Read && c.Limit > 0:
		return bad("mode", "read is a mode of read/write locks; a semaphore (limit %d) has none", c.Limit)
	}
	if c.Limit > 0 {
		c.Weight = max(c.Weight, 1)
	}
	if c.Limit == 1 {
		return Claim{}, nil // one unit taken whole: the mutex
	}
	return c, nil
}
