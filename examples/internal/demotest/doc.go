// Package demotest is the harness of the demo programs' tests: it starts a
// program's run function on a free loopback port on every backend the
// demos serve on (memory, Redis, Redis Cluster, PostgreSQL and the
// Firestore emulator, the servers started by internal/testenv), hands its address to the test's client,
// then stops the program and checks that it shut down gracefully.
//
//	func TestDemoServer(t *testing.T) {
//		demotest.Run(t, program().Run, demotest.HTTPContract)
//	}
//
// [HTTPContract] is the client side of the HTTP demos' common contract
// (POST /orders, POST /notes, GET /stats); the gRPC demo brings its own.
//
// [RunCluster] is the proof of exactly-once across nodes: it starts several
// instances of a program on one shared backend server (every backend but
// memory), each with its own clients, and hands all their addresses to the
// check, which fires concurrent duplicates at them ([Burst]) and sums their
// executions; [HTTPCluster] is that check for the HTTP demos.
//
//	func TestDemoCluster(t *testing.T) {
//		demotest.RunCluster(t, program().Run, demotest.ClusterInstances, demotest.HTTPCluster)
//	}
//
// [TxBackend] is the harness of the transactional mode's tests (pgstore.Tx
// through ginadapter, echoadapter, echo5adapter and grpcinterceptor): a guard on a
// PostgreSQL table of the test's own, an orders table its handlers write
// in the work's transaction; [RunTxHTTP] is the HTTP adapters' proof.
package demotest
