// Package examples holds runnable programs that show idemkit at work, one
// folder per program. It is a module of its own and is never tagged.
//
//   - lockdemo: the lock layer on the in-memory backend: contention,
//     growing fences, renewal of a slow job's lease, and fencing out a stale
//     holder.
package examples
