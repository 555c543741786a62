package mirror

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/baton-dev/baton/internal/keyspace"
)

// contender is one contender key of a lock, as etcd has it.
type contender struct {
	etcdKey   string
	createRev int64
	lease     int64
	holder    keyspace.Holder
	seen      time.Time // when the mirror read this version of it
}

// objectRef names a Lock object, or for an election (election set) its
// Lease: namespace (the scope) and name.
type objectRef struct {
	namespace, name string
	election        bool
}

// lockView is the contenders of one lock.
type lockView struct {
	key        string
	contenders map[string]contender // by etcd key
}

// view is the mirror's copy of the locks in etcd, fed by a full read and
// then by the watch.
type view struct {
	mu    sync.Mutex
	locks map[objectRef]*lockView // the elections too, by their Leases' refs
	rev   int64                   // the etcd revision the view reflects
	now   func() time.Time
}

func newView() *view { return &view{locks: map[objectRef]*lockView{}, now: time.Now} }

// reset replaces the view with kvs, read at revision rev, and returns every
// lock it had or has now.
func (v *view) reset(kvs []*mvccpb.KeyValue, rev int64) []objectRef {
	v.mu.Lock()
	defer v.mu.Unlock()
	var refs []objectRef
	for ref := range v.locks {
		refs = append(refs, ref)
	}
	v.locks = map[objectRef]*lockView{}
	v.rev = rev
	for _, kv := range kvs {
		if ref, ok := v.putLocked(kv); ok {
			refs = append(refs, ref)
		}
	}
	return refs
}

// put records a contender key written at kv.ModRevision.
func (v *view) put(kv *mvccpb.KeyValue) (objectRef, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.rev = max(v.rev, kv.ModRevision)
	return v.putLocked(kv)
}

func (v *view) putLocked(kv *mvccpb.KeyValue) (objectRef, bool) {
	ref, k, ok := refOf(string(kv.Key))
	if !ok {
		return objectRef{}, false
	}
	l := v.locks[ref]
	if l == nil {
		l = &lockView{key: k.String(), contenders: map[string]contender{}}
		v.locks[ref] = l
	}
	l.contenders[string(kv.Key)] = contender{etcdKey: string(kv.Key), createRev: kv.CreateRevision, lease: kv.Lease, holder: keyspace.DecodeHolder(kv.Value), seen: v.now()}
	return ref, true
}

// refOf is the object an etcd key is mirrored into: a lock's contender
// key's Lock, an election's candidate key's Lease.
func refOf(etcdKey string) (objectRef, keyspace.Key, bool) {
	if scope, k, _, ok := keyspace.ParseAnyContender(etcdKey); ok {
		return objectRef{namespace: scope, name: ObjectName(k.String())}, k, true
	}
	if scope, k, _, ok := keyspace.ParseAnyCandidate(etcdKey); ok {
		return objectRef{namespace: scope, name: ObjectName(k.String()), election: true}, k, true
	}
	return objectRef{}, keyspace.Key{}, false
}

// remove records the delete of a contender key at revision rev.
func (v *view) remove(etcdKey string, rev int64) (objectRef, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.rev = max(v.rev, rev)
	ref, _, ok := refOf(etcdKey)
	if !ok {
		return objectRef{}, false
	}
	if l := v.locks[ref]; l != nil {
		delete(l.contenders, etcdKey)
		if len(l.contenders) == 0 {
			delete(v.locks, ref)
		}
	}
	return ref, true
}

// get returns the key of the lock ref and its contenders, the holder
// first, and the revision of the view; none when nobody contends.
func (v *view) get(ref objectRef) (key string, cs []contender, rev int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	l := v.locks[ref]
	if l == nil {
		return "", nil, v.rev
	}
	for _, c := range l.contenders {
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b contender) int { return cmp.Compare(a.createRev, b.createRev) })
	return l.key, cs, v.rev
}

// has reports whether anyone contends for the lock ref.
func (v *view) has(ref objectRef) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.locks[ref] != nil
}
