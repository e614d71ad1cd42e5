package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
)

// TestSchemaStatements: SetupSchema's statements are schema.sql's two (the
// table and the claim procedure), without DELIMITER lines or comment
// lines, with every name of the default table replaced by the qualified
// names of the table given.
func TestSchemaStatements(t *testing.T) {
	tn, err := parseTableName("app.recs")
	if err != nil {
		t.Fatal(err)
	}
	stmts := statements(tn)
	if len(stmts) != 2 || !strings.HasPrefix(stmts[0], "CREATE TABLE IF NOT EXISTS `app`.`recs` (") ||
		!strings.HasPrefix(stmts[1], "CREATE PROCEDURE IF NOT EXISTS `app`.`recs_claim`(") {
		t.Fatalf("statements: %q; want the table's and the procedure's", stmts)
	}
	for _, s := range stmts {
		for _, bad := range []string{"DELIMITER", defaultTable, "\n--"} {
			if strings.Contains(s, bad) {
				t.Fatalf("statement %q contains %q", s, bad)
			}
		}
	}
	if !strings.Contains(stmts[1], "FROM `app`.`recs` AS r") || !strings.HasSuffix(stmts[1], "END") {
		t.Fatalf("the procedure does not name the table, or is cut: %q", stmts[1])
	}
	if !strings.Contains(stmts[0], "KEY `recs_keep_until_idx` (keep_until)") {
		t.Fatalf("the table's index is not renamed: %q", stmts[0])
	}
}

// TestSchemaSQLAppliesWithTheClient: schema.sql, as SchemaSQL returns it,
// applies twice with the mariadb client (its DELIMITER lines included),
// and a store on the default table name then claims.
func TestSchemaSQLAppliesWithTheClient(t *testing.T) {
	t.Parallel()
	client, err := exec.LookPath("mariadb")
	if err != nil {
		if client, err = exec.LookPath("mysql"); err != nil {
			t.Fatal("the mariadb client was not found on PATH: install Debian's mariadb-client package (mariadb-server brings it)")
		}
	}
	srv := testenv.MySQL(t)
	admin := newDB(t, srv.DSN, 2, nil)
	database := newDatabase(t, admin)
	cfg, err := mysql.ParseDSN(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(cfg.Addr, ":")
	for range 2 {
		cmd := exec.CommandContext(t.Context(), client, "--protocol=tcp", "-h", host, "-P", port, "-u", cfg.User, database)
		cmd.Stdin = strings.NewReader(SchemaSQL())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s < schema.sql: %v\n%s", client, err, out)
		}
	}
	cfg.DBName = database
	db := newDB(t, cfg.FormatDSN(), 2, nil)
	s, err := New(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, claimed, err := s.Claim(t.Context(), "k", fp, time.Minute); err != nil || !claimed {
		t.Fatalf("Claim on the table schema.sql made: %v, %v", claimed, err)
	}
}

// TestSetupSchemaIdempotent: SetupSchema runs again on its table, and
// eight processes' SetupSchema at once on a fresh one all succeed; the
// tables then take claims.
func TestSetupSchemaIdempotent(t *testing.T) {
	t.Parallel()
	srv := testenv.MySQL(t)
	admin := newDB(t, srv.DSN, 2, nil)
	ctx := t.Context()
	opt := table(t, admin)
	if err := SetupSchema(ctx, admin, opt); err != nil {
		t.Fatalf("second SetupSchema: %v", err)
	}
	fresh := WithTable(newDatabase(t, admin) + ".records")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	start := make(chan struct{})
	for range 8 {
		db := newDB(t, srv.DSN, 2, nil)
		wg.Go(func() {
			<-start
			errs <- SetupSchema(ctx, db, fresh)
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent SetupSchema: %v", err)
		}
	}
	for _, o := range []Option{opt, fresh} {
		s, _ := New(admin, o)
		if _, claimed, err := s.Claim(ctx, "k", fp, time.Minute); err != nil || !claimed {
			t.Fatalf("Claim after SetupSchema: %v, %v", claimed, err)
		}
	}
}

// TestInvalidOptions checks that bad names and limits are refused with
// InvalidArgument before any SQL: the client is a closed DB, so any I/O
// would fail with ServiceUnavailable instead.
func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	closed := newDB(t, testenv.MySQL(t).DSN, 1, nil)
	_ = closed.Close()
	long := strings.Repeat("t", maxTableLen+1)
	for _, name := range []string{"", "1r", "r;drop table x", "r`", "r-x", "a.b.c", ".r", "r.", "ü", long, "s." + long, strings.Repeat("s", maxDatabaseLen+1) + ".r"} {
		if _, err := New(closed, WithTable(name)); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("New with table %q: %v; want InvalidArgument", name, err)
		}
		if err := SetupSchema(t.Context(), closed, WithTable(name)); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("SetupSchema with table %q: %v; want InvalidArgument", name, err)
		}
	}
	for _, opts := range [][]Option{{WithMaxResponseBytes(0)}, {WithMaxResponseBytes(maxResponseLimit + 1)}, {WithSweepBatch(0)},
		{WithMaxClockStep(-time.Millisecond)}, {WithTxIsolation(sql.LevelReadUncommitted)}, {nil}} {
		if _, err := New(closed, opts...); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("New with a bad option: %v; want InvalidArgument", err)
		}
	}
	if _, err := New(nil); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("New(nil): %v", err)
	}
	if err := SetupSchema(t.Context(), nil); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("SetupSchema(nil): %v", err)
	}
	for _, name := range []string{"records", "S.R_1", strings.Repeat("t", maxTableLen)} {
		if _, err := New(closed, WithTable(name), WithMaxResponseBytes(maxResponseLimit), WithMaxClockStep(0)); err != nil {
			t.Fatalf("New with table %q: %v", name, err)
		}
	}
}

// TestClaimWithoutClaimProcedure checks that a table whose claim
// procedure is missing makes a claim fail with Misconfigured pointing at
// the schema, caused by the server's error 1305, not an internal error.
func TestClaimWithoutClaimProcedure(t *testing.T) {
	t.Parallel()
	admin := newDB(t, testenv.MySQL(t).DSN, 2, nil)
	opt := table(t, admin)
	s, err := New(admin, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(t.Context(), "DROP PROCEDURE "+s.cfg.table.claimProc()); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Claim(t.Context(), "k", fp, time.Minute)
	var me *mysql.MySQLError
	if idemkit.CodeOf(err) != idemkit.CodeMisconfigured || !strings.Contains(err.Error(), "schema.sql") || !errors.As(err, &me) || me.Number != erSPDoesNotExist {
		t.Fatalf("Claim without the claim procedure: %v; want Misconfigured about the schema, caused by error 1305", err)
	}
}

// TestNoPrivileges: a user without privileges on the record table (nor
// on its procedure) gets AuthFailed naming the grants it needs, from a
// claim and from a read, caused by the server's access-denied error.
func TestNoPrivileges(t *testing.T) {
	t.Parallel()
	srv := testenv.MySQL(t)
	admin := newDB(t, srv.DSN, 2, nil)
	opt := table(t, admin)
	user := testenv.Name(t)
	if _, err := admin.ExecContext(t.Context(), "CREATE USER '"+user+"'@'%'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), "DROP USER '"+user+"'@'%'") })
	cfg, err := mysql.ParseDSN(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.DBName = user, ""
	s, err := New(newDB(t, cfg.FormatDSN(), 2, nil), opt)
	if err != nil {
		t.Fatal(err)
	}
	_, _, claimErr := s.Claim(t.Context(), "k", fp, time.Minute)
	_, _, getErr := s.Get(t.Context(), "k")
	for what, err := range map[string]error{"Claim": claimErr, "Get": getErr} {
		var me *mysql.MySQLError
		if idemkit.CodeOf(err) != idemkit.CodeAuthFailed || !strings.Contains(err.Error(), "grant the store's user") || !errors.As(err, &me) {
			t.Fatalf("%s without privileges: %v; want AuthFailed naming the grants, caused by a *mysql.MySQLError", what, err)
		}
		t.Logf("%s: %v", what, err)
	}
}

// TestFenceOverflowWritesNothing: a key whose tombstone carries
// idemkit.FenceMax cannot be claimed (Internal, fence overflow, from the
// table's check) and its row is left as it was.
func TestFenceOverflowWritesNothing(t *testing.T) {
	t.Parallel()
	admin := newDB(t, testenv.MySQL(t).DSN, 2, nil)
	s, err := New(admin, table(t, admin))
	if err != nil {
		t.Fatal(err)
	}
	p := lockProbes{admin: admin, table: tableOf(s)}
	if err := p.raiseFence(t.Context(), "k", idemkit.FenceMax); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Claim(t.Context(), "k", fp, time.Minute)
	if idemkit.CodeOf(err) != idemkit.CodeInternal || !strings.Contains(err.Error(), "fence overflow") {
		t.Fatalf("Claim past FenceMax: %v; want Internal, fence overflow", err)
	}
	if f, err := p.fence(t.Context(), "k"); err != nil || f != idemkit.FenceMax {
		t.Fatalf("the row's fence after the refused claim: %v, %v; want FenceMax", f, err)
	}
}

// TestClassifyNumbers maps server error numbers to codes, by number.
func TestClassifyNumbers(t *testing.T) {
	for n, want := range map[uint16]idemkit.Code{
		erLockDeadlock: idemkit.CodeServiceUnavailable, erLockWaitTimeout: idemkit.CodeNetworkTimeout,
		erStatementTimeout: idemkit.CodeNetworkTimeout, erQueryTimeout: idemkit.CodeNetworkTimeout,
		erServerShutdown: idemkit.CodeServiceUnavailable, erConnectionKilled: idemkit.CodeServiceUnavailable,
		erReadOnlyMode: idemkit.CodeServiceUnavailable, erOptionPrevents: idemkit.CodeServiceUnavailable,
		erTooManyConnections: idemkit.CodeRateLimited, erRecordFileFull: idemkit.CodeRateLimited,
		erNoSuchTable: idemkit.CodeMisconfigured, erSPDoesNotExist: idemkit.CodeMisconfigured,
		erTableAccessDenied: idemkit.CodeAuthFailed, erProcAccessDenied: idemkit.CodeAuthFailed,
		erCheckViolated: idemkit.CodeInternal, erConstraintFailed: idemkit.CodeInternal,
		erNetPacketTooLarge: idemkit.CodeInvalidArgument, 9999: idemkit.CodeInternal,
	} {
		native := &mysql.MySQLError{Number: n}
		err := mapError(context.Background(), "claim", native)
		if idemkit.CodeOf(err) != want || !errors.Is(err, native) || !errors.Is(err, want.Sentinel()) {
			t.Errorf("error %d: %v; want %v wrapping the native error", n, err, want)
		}
	}
	if err := mapError(context.Background(), "claim", mysql.ErrInvalidConn); idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable {
		t.Errorf("ErrInvalidConn: %v; want ServiceUnavailable", err)
	}
}
