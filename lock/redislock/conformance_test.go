package redislock_test

import (
	"testing"

	"github.com/idemkit/idemkit/lock/locktest"
	"github.com/idemkit/idemkit/lock/redislock/redistest"
)

// TestConformance runs the lock conformance suite on a single node and on
// a 3-master cluster. On the cluster, SG10 (fences survive a restart) does
// not apply: the test environment restarts single servers only, and the
// single-node run covers it on a dedicated server with AOF.
func TestConformance(t *testing.T) {
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) { locktest.Run(t, factory(b)) })
	}
}
