// Package guardtest proves that guards run work exactly once: racing
// goroutines, spread over several [middleware.Guard] instances, call
// Execute with one key, and the work must run once, every other caller
// must get its response, and afterwards every guard must replay it.
//
// Build the guards as separate processes would have them: each on a client
// of its own (its own connection pool), all on the same database, so that
// nothing but the backend keeps them apart. Then race them:
//
//	func TestExactlyOnce(t *testing.T) {
//		guards := make([]*middleware.Guard, 4)
//		for i := range guards {
//			guards[i] = newGuard(t) // a store on a client of its own
//		}
//		guardtest.ExactlyOnce(t, guards, guardtest.Race{Callers: 64, Rounds: 50})
//	}
//
// Run it under the race detector (go test -race). It is a test helper of
// this repository: the guard's own tests run it on memstore, and the
// Redis, PostgreSQL and Firestore backends' tests run it on their engines.
// It uses the standard testing package only.
package guardtest
