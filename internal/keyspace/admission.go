package keyspace

import "fmt"

// Admission is a kind of lock's rule of who holds it together: given the
// front of a line whose first contender is of its kind, how many of them
// hold; and how a claim of its kind enters the line (Alone). Each kind of
// lock is one type here; a new kind with a rule of its own is a new type
// and a case in Claim.Admission, and the engine, which asks Holders and
// Alone, is not changed.
//
// Every admission keeps the line's promise (see Claim): nobody passes a
// contender that does not fit yet, and whether a contender holds depends
// only on the contenders ahead of it.
type Admission interface {
	// Holders returns how many contenders at the front of line hold the
	// lock together; line is not empty, and its first is of this kind.
	Holders(line []Claim) int
	// Alone reports whether a claim of this kind holds only alone, first
	// in line. Such a claim enters the line with etcd's Mutex transactions:
	// its try writes its key only where the line is empty, and its wait
	// waits for every contender ahead of it to leave. A claim that may hold
	// beside others writes its key with a read of the claims ahead in the
	// same transaction, and holds when Holders counts it in.
	Alone() bool
	// Kind names the sort of lock, for messages: "a read/write lock".
	Kind() string
}

// Admission returns the rule of the lock that c contends for.
func (c Claim) Admission() Admission {
	switch {
	case c.Limit > 0:
		return semaphore{limit: c.Limit}
	case c.Mode == Read:
		return readers{}
	}
	return exclusive{}
}

// Holders returns how many contenders at the front of line, ordered by
// create revision, hold the lock together: as the first one's admission
// says.
func Holders(line []Claim) int {
	if len(line) == 0 {
		return 0
	}
	return line[0].Admission().Holders(line)
}

// exclusive is the mutex's admission, and a writer's at the front of a
// read/write lock: the first contender alone.
type exclusive struct{}

func (exclusive) Holders([]Claim) int { return 1 }
func (exclusive) Alone() bool         { return true }
func (exclusive) Kind() string        { return "a lock (mutex or read/write)" }

// readers is the admission of a read/write lock with a reader at the
// front: the readers up to the first writer.
type readers struct{}

func (readers) Holders(line []Claim) int {
	for i, c := range line {
		if c.Mode != Read || c.Limit != 0 {
			return i
		}
	}
	return len(line)
}

func (readers) Alone() bool  { return false }
func (readers) Kind() string { return "a read/write lock" }

// semaphore is the admission of a semaphore of limit units: the claims up
// to the first that does not fit in what is left.
type semaphore struct{ limit int }

func (s semaphore) Holders(line []Claim) int {
	units := 0
	for i, c := range line {
		if c.Limit == 0 || units+c.Units() > s.limit {
			return i
		}
		units += c.Units()
	}
	return len(line)
}

func (semaphore) Alone() bool { return false }

func (s semaphore) Kind() string { return fmt.Sprintf("a semaphore of %d units", s.limit) }
