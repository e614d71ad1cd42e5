package redisstore_test

import (
	"testing"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/redislock/redistest"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/idemkit/idemkit/store/storetest"
)

// TestConformance runs the store conformance suite on a single node and on
// a 3-master cluster, with a 1 MiB response limit so that the limit is
// checked too.
func TestConformance(t *testing.T) {
	const limit = 1 << 20
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) *storetest.Env {
				c := b.NewClient(t)
				s, err := redisstore.New(c, redisstore.WithKeyPrefix(testenv.Name(t)), redisstore.WithMaxResponseBytes(limit))
				if err != nil {
					t.Fatal(err)
				}
				return &storetest.Env{Store: s, Break: func() { _ = c.Close() }, MaxResponseBytes: limit}
			})
		})
	}
}
