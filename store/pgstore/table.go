package pgstore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idemkit"
)

// identPart is one part of a table name: a letter or underscore, then
// letters, digits and underscores.
var identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Identifier limits: PostgreSQL's 63 bytes, less "_keep_until_idx" for
// the table, so that its index names fit too.
const (
	maxSchemaLen = 63
	maxTableLen  = 48
)

// tableName is a validated table name, optionally schema-qualified,
// always rendered quoted.
type tableName struct {
	schema, table string
}

// parseTableName validates name as [WithTable] documents it.
func parseTableName(name string) (tableName, error) {
	bad := func(detail string) (tableName, error) {
		return tableName{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", fmt.Sprintf("record table %q: %s", name, detail), nil)
	}
	schema, table, qualified := strings.Cut(name, ".")
	if !qualified {
		schema, table = "", name
	}
	switch {
	case qualified && !identPart.MatchString(schema):
		return bad("the schema must match [A-Za-z_][A-Za-z0-9_]*")
	case len(schema) > maxSchemaLen:
		return bad(fmt.Sprintf("the schema exceeds %d bytes", maxSchemaLen))
	case !identPart.MatchString(table):
		return bad(`the name must be "table" or "schema.table", each matching [A-Za-z_][A-Za-z0-9_]*`)
	case len(table) > maxTableLen:
		return bad(fmt.Sprintf("the table name exceeds %d bytes", maxTableLen))
	}
	return tableName{schema: schema, table: table}, nil
}

// sanitize returns the quoted, possibly schema-qualified name, for SQL.
func (n tableName) sanitize() string {
	if n.schema == "" {
		return pgx.Identifier{n.table}.Sanitize()
	}
	return pgx.Identifier{n.schema, n.table}.Sanitize()
}

// derived returns the quoted, unqualified name of an index of the table:
// the table part plus suffix.
func (n tableName) derived(suffix string) string {
	return pgx.Identifier{n.table + suffix}.Sanitize()
}

// claimFunc returns the quoted name of the table's claim function (see
// schema.sql), in the table's schema.
func (n tableName) claimFunc() string {
	if n.schema == "" {
		return pgx.Identifier{n.table + "_claim"}.Sanitize()
	}
	return pgx.Identifier{n.schema, n.table + "_claim"}.Sanitize()
}

// maxChannelLen is the longest notification channel name PostgreSQL
// takes (NAMEDATALEN - 1).
const maxChannelLen = 63

// channel returns the table's notification channel: "idemkit:" and the
// name as configured; past 63 bytes, the first 38 bytes of the name, "~"
// and 16 hex digits of its SHA-256.
func (n tableName) channel() string {
	name := n.table
	if n.schema != "" {
		name = n.schema + "." + n.table
	}
	const prefix = "idemkit:"
	if len(prefix)+len(name) <= maxChannelLen {
		return prefix + name
	}
	sum := sha256.Sum256([]byte(name))
	const hexLen = 16
	return prefix + name[:maxChannelLen-len(prefix)-1-hexLen] + "~" + hex.EncodeToString(sum[:hexLen/2])
}

// quoteLiteral returns s as an SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
