package keyspace

// A lock's contenders stand in one line, ordered by create revision, and
// what each asks for is its Claim, carried in its holder record:
//
//   - exclusive (the zero Claim): the mutex, and a writer of a read/write
//     lock. A contender that is not Baton (etcdctl lock) is exclusive too.
//   - shared (Mode "read"): a reader of a read/write lock.
//   - units (Limit N, Weight w): w of the N units of a semaphore.
//
// The holders are the longest front of the line that may hold together
// (Holders, as the first contender's Admission says): an exclusive
// contender alone, readers up to the first writer,
// units up to the first claim that does not fit. Nobody passes a contender
// that does not fit yet: a heavy claim at the front is not starved by light
// ones behind it, and a queued writer blocks the readers that came after
// it. Whether a contender is a holder depends only on the contenders ahead
// of it, and only ever goes from no to yes as they leave: a contender that
// read itself granted stays granted until its key goes.

// Mode says how a contender of a read/write lock shares it.
type Mode string

// Modes of a claim.
const (
	// Exclusive is the mutex and the writer of a read/write lock; it is
	// stored as no mode at all, as etcdctl's contenders have none.
	Exclusive Mode = ""
	// Read shares the lock with other readers.
	Read Mode = "read"
)

// MaxLimit bounds a semaphore's units: a line longer than this is a
// queue, not a lock, and a limit above it is most likely a mistake.
const MaxLimit = 10000

// Claim is what a contender asks of its lock.
type Claim struct {
	// Mode is Read for a reader; Exclusive otherwise.
	Mode Mode `json:"mode,omitempty"`
	// Limit is the semaphore's units, 0 when the lock is not one.
	Limit int `json:"limit,omitempty"`
	// Weight is the units the contender takes (1 when 0) of a semaphore.
	Weight int `json:"weight,omitempty"`
}

// IsExclusive reports whether c holds the lock alone.
func (c Claim) IsExclusive() bool { return c.Admission().Alone() }

// Units is how many units c takes of its semaphore: its weight.
func (c Claim) Units() int {
	if c.Limit == 0 {
		return 0
	}
	return max(c.Weight, 1)
}

// Kind names the sort of lock c contends for, for messages: "a mutex", "a
// read/write lock", "a semaphore of 4 units".
func (c Claim) Kind() string { return c.Admission().Kind() }

// Agrees reports whether c and d may stand in one line: a semaphore's
// contenders agree on its limit, and a semaphore is not a read/write lock.
// Readers, writers and mutex contenders agree with one another.
func (c Claim) Agrees(d Claim) bool { return c.Limit == d.Limit }

// ClaimOf returns the claim of a contender's record: a record that is not
// Baton's claims the lock exclusively.
func ClaimOf(h Holder) Claim {
	if h.Foreign {
		return Claim{}
	}
	return h.Claim
}

// InForce returns the claim of the first Baton contender of line, whose
// limit every later one must agree with; ok is false when line has none
// (empty, or only contenders that are not Baton's).
func InForce(line []Holder) (c Claim, ok bool) {
	for _, h := range line {
		if !h.Foreign {
			return h.Claim, true
		}
	}
	return Claim{}, false
}
