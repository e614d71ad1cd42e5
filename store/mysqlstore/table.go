package mysqlstore

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/idemkit/idemkit"
)

// identPart is one part of a table name: a letter or underscore, then
// letters, digits and underscores.
var identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Identifier limits: 64 characters, less "_keep_until_idx" for the table,
// so that its index and procedure names fit too.
const (
	maxDatabaseLen = 64
	maxTableLen    = 40
)

// tableName is a validated table name, optionally qualified by its
// database, always rendered quoted.
type tableName struct {
	database, table string
}

// parseTableName validates name as [WithTable] documents it.
func parseTableName(name string) (tableName, error) {
	bad := func(detail string) (tableName, error) {
		return tableName{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", fmt.Sprintf("record table %q: %s", name, detail), nil)
	}
	db, table, qualified := strings.Cut(name, ".")
	if !qualified {
		db, table = "", name
	}
	switch {
	case qualified && !identPart.MatchString(db):
		return bad("the database must match [A-Za-z_][A-Za-z0-9_]*")
	case len(db) > maxDatabaseLen:
		return bad(fmt.Sprintf("the database name exceeds %d bytes", maxDatabaseLen))
	case !identPart.MatchString(table):
		return bad(`the name must be "table" or "database.table", each matching [A-Za-z_][A-Za-z0-9_]*`)
	case len(table) > maxTableLen:
		return bad(fmt.Sprintf("the table name exceeds %d bytes", maxTableLen))
	}
	return tableName{database: db, table: table}, nil
}

// qualify returns the quoted name, in the table's database when it has
// one.
func (n tableName) qualify(name string) string {
	if n.database == "" {
		return "`" + name + "`"
	}
	return "`" + n.database + "`.`" + name + "`"
}

// quoted returns the quoted, possibly qualified table name, for SQL.
func (n tableName) quoted() string { return n.qualify(n.table) }

// claimProc returns the quoted name of the table's claim procedure (see
// schema.sql), in the table's database.
func (n tableName) claimProc() string { return n.qualify(n.table + "_claim") }
