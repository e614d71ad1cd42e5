// Package firestoretest helps test code built on Firestore, such as
// [github.com/idemkit/idemkit/lock/firestorelock] and the Firestore record
// store, against the Firestore emulator: it starts the emulator (shared by
// the package's tests), gives each test a project of its own (an empty
// database), and connects real clients whose RPCs pass through
// interceptors first, for counting round trips and for fault injection by
// a wrapper with the real server behind it.
//
// It is the test infrastructure of this repository's Firestore modules and
// is just as useful to a user who tests their own code on a Firestore lock
// or store. A package that uses it runs its tests through [Main], which
// stops the emulator they started:
//
//	func TestMain(m *testing.M) { firestoretest.Main(m) }
//
//	func TestThing(t *testing.T) {
//		var commits atomic.Int32
//		c := firestoretest.Client(t, firestoretest.Project(t), firestoretest.Intercept(
//			func(method string, req any, call func() error) error {
//				if method == firestoretest.CommitMethod {
//					commits.Add(1)
//				}
//				return call()
//			})...)
//		...
//	}
//
// The emulator is the Cloud SDK's Firestore emulator jar run by java on a
// free loopback port; with FIRESTORE_EMULATOR_HOST set, that emulator is
// used instead.
package firestoretest
