// Package demotest is the harness of the demo programs' tests: it starts a
// program's run function on a free loopback port on every backend the
// demos serve on (memory, Redis, Redis Cluster and PostgreSQL, the servers
// started by internal/testenv), hands its address to the test's client,
// then stops the program and checks that it shut down gracefully.
//
//	func TestDemoServer(t *testing.T) {
//		demotest.Run(t, program().Run, demotest.HTTPContract)
//	}
//
// [HTTPContract] is the client side of the HTTP demos' common contract
// (POST /orders, POST /notes, GET /stats); the gRPC demo brings its own.
package demotest
