package fingerprint

import "sync"

// state is the scratch space of one computation: the hash input (or the
// canonical JSON), the canonicaliser's stacks and the query pairs. States
// are pooled so that a fingerprint costs no allocations in the common case.
type state struct {
	buf   []byte
	c     canon
	pairs []queryPair
	qbuf  []byte
	names []string
}

// Buffers that grew beyond these sizes (a large body) are left to the
// garbage collector instead of being kept in the pool.
const (
	maxPooledBytes = 256 << 10
	maxPooledItems = 4096
)

var statePool = sync.Pool{New: func() any { return new(state) }}

func getState() *state { return statePool.Get().(*state) }

func putState(st *state) {
	if cap(st.buf) > maxPooledBytes || cap(st.c.scratch) > maxPooledBytes ||
		cap(st.c.keys) > maxPooledBytes || cap(st.qbuf) > maxPooledBytes ||
		cap(st.c.members) > maxPooledItems || cap(st.c.objects) > maxPooledItems ||
		cap(st.c.spans) > maxPooledItems || cap(st.pairs) > maxPooledItems ||
		cap(st.names) > maxPooledItems {
		return
	}
	clear(st.names) // drop references to parameter strings
	st.names = st.names[:0]
	statePool.Put(st)
}
