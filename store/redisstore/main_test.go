package redisstore_test

import (
	"testing"

	"github.com/idemkit/idemkit/lock/redislock/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
