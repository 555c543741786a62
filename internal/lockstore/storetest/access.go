package storetest

import "testing"

// testCheckAccess: a store allowed everywhere (as the harness's are) may
// read and write under any prefix; asking writes nothing.
func testCheckAccess(t *testing.T, s *suite) {
	if err := s.h.Store.CheckAccess(ctx(t), s.base); err != nil {
		t.Fatalf("CheckAccess: %v", err)
	}
	if err := s.h.Store.Refused(); err != nil {
		t.Errorf("Refused after an allowed check: %v", err)
	}
	cs, _, err := s.h.Store.Contenders(ctx(t), s.base, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 0 {
		t.Errorf("CheckAccess left %d keys under %s: %+v", len(cs), s.base, cs)
	}
}
