package pgstore

import (
	"context"
	"testing"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/pglock/pgtest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// table creates a record table in a schema of the test's own and returns
// the option that names it.
func table(t testing.TB, admin DB) Option {
	t.Helper()
	opt := WithTable(pgtest.Schema(t, admin) + ".records")
	if err := SetupSchema(context.Background(), admin, opt); err != nil {
		t.Fatalf("SetupSchema: %v", err)
	}
	return opt
}
