package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
)

// txCluster sets up a transactional test: n nodes on the package's server
// whose guards discard their logs, a pool of the test's own and the orders
// table (one row per order, with the idempotency key it was made under and
// who made it, no unique key, so that a second execution would show as a
// second row), in the records' database.
func txCluster(t *testing.T, n int, opts ...middleware.Option) (nodes []node, admin *sql.DB, orders string) {
	t.Helper()
	srv := testenv.MySQL(t)
	nodes = cluster(t, srv.DSN, n, append([]middleware.Option{middleware.WithLogger(discard())}, opts...)...)
	admin = newDB(t, srv.DSN, 2, nil)
	orders = strings.TrimSuffix(tableOf(nodes[0].store), "`records`") + "`orders`"
	if _, err := admin.ExecContext(t.Context(), `CREATE TABLE `+orders+` (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(255) NOT NULL, who VARCHAR(64) NOT NULL) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	return nodes, admin, orders
}

// orderRows returns who made each row of key, in order.
func orderRows(t *testing.T, admin *sql.DB, orders, key string) []string {
	t.Helper()
	rows, err := admin.QueryContext(t.Context(), `SELECT who FROM `+orders+` WHERE k = ? ORDER BY id`, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var who []string
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			t.Fatal(err)
		}
		who = append(who, w)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return who
}

// insertOrder inserts an order row for the guarded call of ctx in its
// transaction.
func insertOrder(ctx context.Context, orders, who string) error {
	tx, err := Tx(ctx)
	if err != nil {
		return err
	}
	info, _ := middleware.CallInfoFrom(ctx)
	_, err = tx.ExecContext(ctx, `INSERT INTO `+orders+` (k, who) VALUES (?, ?)`, info.Key, who)
	return err
}

// TestTxCommitsWithOutcome: the work's row and its record commit
// together; a duplicate on another node replays without running; the
// transaction the work gets has no Commit or Rollback of its own, and its
// savepoints work; Tx outside guarded work says so.
func TestTxCommitsWithOutcome(t *testing.T) {
	t.Parallel()
	nodes, admin, orders := txCluster(t, 2)
	ctx := t.Context()

	if _, err := Tx(ctx); !errors.Is(err, ErrNoTransaction) {
		t.Fatalf("Tx outside guarded work: %v; want ErrNoTransaction", err)
	}
	var runs atomic.Int64
	work := func(ctx context.Context) (string, error) {
		runs.Add(1)
		if err := insertOrder(ctx, orders, "first"); err != nil {
			return "", err
		}
		tx, err := Tx(ctx)
		if err != nil {
			return "", err
		}
		if _, ok := tx.(interface{ Commit() error }); ok {
			return "", errors.New("the work's transaction has a Commit method")
		}
		if _, err := tx.ExecContext(ctx, "SAVEPOINT sp"); err != nil {
			return "", err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+orders+` (k, who) VALUES ('savepoint', 'first')`); err != nil {
			return "", err
		}
		if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT sp"); err != nil {
			return "", err
		}
		// Until the guard commits, the row is the transaction's alone.
		if who := orderRows(t, admin, orders, "k1"); len(who) != 0 {
			return "", fmt.Errorf("rows of k1 seen outside the transaction before its commit: %v", who)
		}
		return "order-1", nil
	}
	v, replayed, err := middleware.Do(ctx, nodes[0].guard, "k1", "payload", work)
	if err != nil || replayed || v != "order-1" {
		t.Fatalf("first: %q, replayed %v, %v", v, replayed, err)
	}
	v, replayed, err = middleware.Do(ctx, nodes[1].guard, "k1", "payload", work)
	if err != nil || !replayed || v != "order-1" {
		t.Fatalf("replay on the other node: %q, replayed %v, %v", v, replayed, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("%d executions; want 1", runs.Load())
	}
	if who := orderRows(t, admin, orders, "k1"); len(who) != 1 {
		t.Fatalf("rows of k1: %v; want one", who)
	}
	if who := orderRows(t, admin, orders, "savepoint"); len(who) != 0 {
		t.Fatalf("the rolled-back savepoint's rows: %v; want none", who)
	}
	rec, ok, err := nodes[0].store.Get(ctx, "idempotency::k1")
	if err != nil || !ok || rec.State != store.StateCompleted {
		t.Fatalf("the record: %+v, %v, %v; want completed", rec, ok, err)
	}
}

// TestTxRolledBackWithoutOutcome: work that writes its row and then fails
// or panics leaves no row and no record; its retry runs again and commits
// one row.
func TestTxRolledBackWithoutOutcome(t *testing.T) {
	t.Parallel()
	nodes, admin, orders := txCluster(t, 1)
	g := nodes[0].guard
	ctx := t.Context()
	for _, c := range []struct {
		name string
		fail func() error
	}{
		{"error", func() error { return errors.New("the work failed") }},
		{"panic", func() error { panic("the work panicked") }},
	} {
		key := "k-" + c.name
		func() {
			defer func() { _ = recover() }()
			_, _, err := middleware.Do(ctx, g, key, "payload", func(ctx context.Context) (string, error) {
				if err := insertOrder(ctx, orders, "failed"); err != nil {
					return "", err
				}
				return "", c.fail()
			})
			if err == nil {
				t.Errorf("%s: the failed call returned no error", c.name)
			}
		}()
		if who := orderRows(t, admin, orders, key); len(who) != 0 {
			t.Fatalf("%s: rows after the failure: %v; want none", c.name, who)
		}
		if _, ok, err := nodes[0].store.Get(ctx, "idempotency::"+key); err != nil || ok {
			t.Fatalf("%s: a record after the failure: %v, %v; want none", c.name, ok, err)
		}
		v, replayed, err := middleware.Do(ctx, g, key, "payload", func(ctx context.Context) (string, error) {
			return "done", insertOrder(ctx, orders, "retry")
		})
		if err != nil || replayed || v != "done" {
			t.Fatalf("%s: the retry: %q, replayed %v, %v; want it to run", c.name, v, replayed, err)
		}
		if who := orderRows(t, admin, orders, key); len(who) != 1 || who[0] != "retry" {
			t.Fatalf("%s: rows after the retry: %v; want the retry's alone", c.name, who)
		}
	}
}

// noRenewals is a store whose renewals fail, so that its claims' leases
// run out while their work runs.
type noRenewals struct{ *Store }

func (noRenewals) Extend(context.Context, string, idemkit.Fence, time.Duration) (time.Time, bool, error) {
	return time.Time{}, false, errors.New("the database cannot be reached")
}

// TestTxTakeover: a node's lease runs out while its work runs; another
// node claims the key, runs the work and commits. The first node's work,
// which wrote its row in its transaction and then returned, fails
// (Unavailable, its lease lost) and its row is not there: the key has the
// second node's row alone, and replays the second node's outcome.
func TestTxTakeover(t *testing.T) {
	t.Parallel()
	nodes, admin, orders := txCluster(t, 2)
	ctx := t.Context()
	const lease = 300 * time.Millisecond
	slow, err := middleware.New(noRenewals{nodes[0].store}, middleware.WithLeaseTTL(lease), middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	fast, err := middleware.New(nodes[1].store, middleware.WithLeaseTTL(lease), middleware.WithLogger(discard()),
		middleware.WithWaitBudget(10*time.Second), fastWaits)
	if err != nil {
		t.Fatal(err)
	}
	inserted, secondDone := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, _, err := middleware.Do(ctx, slow, "k", "payload", func(ctx context.Context) (string, error) {
			if err := insertOrder(ctx, orders, "first"); err != nil {
				return "", err
			}
			close(inserted)
			// Sleeps past its lease, ignoring its ctx, until the other
			// node has run the work and committed.
			select {
			case <-secondDone:
			case <-time.After(20 * time.Second):
			}
			return "first", nil
		})
		first <- err
	}()
	<-inserted
	v, replayed, err := middleware.Do(ctx, fast, "k", "payload", func(ctx context.Context) (string, error) {
		return "second", insertOrder(ctx, orders, "second")
	})
	close(secondDone)
	if err != nil || replayed || v != "second" {
		t.Fatalf("the second node: %q, replayed %v, %v; want it to take over and run", v, replayed, err)
	}
	err = <-first
	var unavailable *middleware.UnavailableError
	if !errors.As(err, &unavailable) || !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("the first node's call: %v; want Unavailable wrapping idemkit.ErrLeaseLost", err)
	}
	if who := orderRows(t, admin, orders, "k"); len(who) != 1 || who[0] != "second" {
		t.Fatalf("rows of k: %v; want the second node's alone", who)
	}
}

// TestStoreInCallersTx: a store on the caller's *sql.Tx claims and
// completes inside it: nothing is visible outside before the commit, a
// rollback leaves nothing (the key is free again), a commit leaves the
// outcome; its statements are not retried and it has no Work of its own.
func TestStoreInCallersTx(t *testing.T) {
	t.Parallel()
	srv := testenv.MySQL(t)
	admin := newDB(t, srv.DSN, 4, nil)
	opt := table(t, admin)
	outside, err := New(admin, opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, commit := range []bool{false, true} {
		key := fmt.Sprint("in-tx-", commit)
		tx, err := admin.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(tx, opt)
		if err != nil {
			t.Fatal(err)
		}
		if _, w := s.Work(ctx, key, 1); w != nil {
			t.Fatal("a store on a *sql.Tx offers a Work of its own")
		}
		rec, claimed, err := s.Claim(ctx, key, "fp", time.Minute)
		if err != nil || !claimed {
			t.Fatalf("Claim in the transaction: %v, %v", claimed, err)
		}
		if ok, err := s.Complete(ctx, store.Record{Key: key, Fingerprint: "fp", State: store.StateCompleted, Response: []byte("r"), Fence: rec.Fence}, time.Hour); err != nil || !ok {
			t.Fatalf("Complete in the transaction: %v, %v", ok, err)
		}
		if _, ok, err := outside.Get(ctx, key); err != nil || ok {
			t.Fatalf("the record outside the transaction before its end: %v, %v; want none", ok, err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		got, ok, err := outside.Get(ctx, key)
		if err != nil || ok != commit || (commit && string(got.Response) != "r") {
			t.Fatalf("commit %v: the record after: %+v, %v, %v", commit, got, ok, err)
		}
	}
}

// TestStoreOnConn: a store on one *sql.Conn runs a record's whole life on
// it, and SetupSchema runs on a *sql.Conn too.
func TestStoreOnConn(t *testing.T) {
	t.Parallel()
	srv := testenv.MySQL(t)
	admin := newDB(t, srv.DSN, 2, nil)
	var rt roundTrips
	conn, err := newDB(t, srv.DSN, 1, &rt).Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	opt := WithTable(newDatabase(t, admin) + ".records")
	ctx := t.Context()
	if err := SetupSchema(ctx, conn, opt); err != nil {
		t.Fatalf("SetupSchema on a *sql.Conn: %v", err)
	}
	s, err := New(conn, opt)
	if err != nil {
		t.Fatal(err)
	}
	before := rt.count()
	rec, claimed, err := s.Claim(ctx, "k", "fp", time.Minute)
	if err != nil || !claimed {
		t.Fatalf("Claim: %v, %v", claimed, err)
	}
	until, ok, err := s.Extend(ctx, "k", rec.Fence, 2*time.Minute)
	if err != nil || !ok || !until.After(rec.ExpiresAt) {
		t.Fatalf("Extend: %v, %v, %v; want a later expiry than %v", until, ok, err, rec.ExpiresAt)
	}
	// On the same connection, a statement that matches nothing reports
	// nothing, whatever the one before reported.
	if _, ok, err := s.Extend(ctx, "k", rec.Fence+1, time.Minute); err != nil || ok {
		t.Fatalf("Extend of another fence after a successful one: %v, %v; want not done", ok, err)
	}
	if ok, err := s.Release(ctx, "k", rec.Fence+1); err != nil || ok {
		t.Fatalf("Release of another fence: %v, %v; want not done", ok, err)
	}
	if ok, err := s.Complete(ctx, store.Record{Key: "k", Fingerprint: "fp", State: store.StateCompleted, Response: []byte("r"), Fence: rec.Fence}, time.Hour); err != nil || !ok {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	if _, ok, err := s.Extend(ctx, "k", rec.Fence, time.Minute); err != nil || ok {
		t.Fatalf("Extend of a completed claim: %v, %v; want not done", ok, err)
	}
	if got, ok, err := s.Get(ctx, "k"); err != nil || !ok || string(got.Response) != "r" {
		t.Fatalf("Get: %+v, %v, %v", got, ok, err)
	}
	if n := rt.count() - before; n != 7 {
		t.Fatalf("7 calls took %d round trips; want one each", n)
	}
	if ok, err := s.Delete(ctx, "k"); err != nil || !ok {
		t.Fatalf("Delete: %v, %v", ok, err)
	}
	if ok, err := s.Delete(ctx, "k"); err != nil || ok {
		t.Fatalf("Delete again: %v, %v; want nothing deleted", ok, err)
	}
}

// TestTxDeadlockFailsTheCommit: a statement of the work loses a deadlock
// (InnoDB rolls its whole transaction back, and the connection would go on
// outside any transaction) and the work ignores it and returns: the
// guard's commit fails with store.ErrWorkConflict, nothing of the work
// lands (neither its write before the deadlock nor the outcome), and the
// claim is released, so a retry runs the work again.
func TestTxDeadlockFailsTheCommit(t *testing.T) {
	t.Parallel()
	nodes, admin, _ := txCluster(t, 1)
	ctx := t.Context()
	accounts := strings.TrimSuffix(tableOf(nodes[0].store), "`records`") + "`accounts`"
	if _, err := admin.ExecContext(ctx, `CREATE TABLE `+accounts+` (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	// Row 1 for the work; rows 2 to 201 for the other transaction, which
	// changes them all and so weighs more: InnoDB rolls the work back.
	var values []string
	for id := 1; id <= 201; id++ {
		values = append(values, fmt.Sprintf("(%d, 0)", id))
	}
	if _, err := admin.ExecContext(ctx, `INSERT INTO `+accounts+` VALUES `+strings.Join(values, ", ")); err != nil {
		t.Fatal(err)
	}
	other := make(chan error, 1)
	var deadlocked error
	_, _, err := middleware.Do(ctx, nodes[0].guard, "deadlock", "payload", func(ctx context.Context) (string, error) {
		tx, err := Tx(ctx)
		if err != nil {
			return "", err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+accounts+` SET n = n + 1 WHERE id = 1`); err != nil {
			return "", err
		}
		otx, err := admin.BeginTx(t.Context(), nil) // not the work's ctx, which ends when it returns
		if err != nil {
			return "", err
		}
		if _, err := otx.ExecContext(ctx, `UPDATE `+accounts+` SET n = n + 1 WHERE id >= 2`); err != nil {
			return "", err
		}
		go func() { // waits for the work's row 1
			_, err := otx.ExecContext(context.WithoutCancel(ctx), `UPDATE `+accounts+` SET n = n + 1 WHERE id = 1`)
			if err == nil {
				err = otx.Commit()
			} else {
				_ = otx.Rollback()
			}
			other <- err
		}()
		time.Sleep(300 * time.Millisecond) // the other transaction now waits for row 1
		_, deadlocked = tx.ExecContext(ctx, `UPDATE `+accounts+` SET n = n + 1 WHERE id = 2`)
		return "done", nil // as if the work had not seen its statement fail
	})
	if oerr := <-other; oerr != nil {
		t.Fatalf("the other transaction: %v; want it to win the deadlock and commit", oerr)
	}
	var me *mysql.MySQLError
	if !errors.As(deadlocked, &me) || me.Number != erLockDeadlock {
		t.Fatalf("the work's statement: %v; want a deadlock (1213)", deadlocked)
	}
	if !errors.Is(err, store.ErrWorkConflict) {
		t.Fatalf("the call: %v; want store.ErrWorkConflict", err)
	}
	var n int
	if err := admin.QueryRowContext(ctx, `SELECT n FROM `+accounts+` WHERE id = 1`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("row 1: n = %d, %v; want 1, the other transaction's write alone", n, err)
	}
	if _, ok, err := nodes[0].store.Get(ctx, "idempotency::deadlock"); err != nil || ok {
		t.Fatalf("a record after the failed commit: %v, %v; want none", ok, err)
	}
	v, replayed, err := middleware.Do(ctx, nodes[0].guard, "deadlock", "payload", func(ctx context.Context) (string, error) {
		return "retried", nil
	})
	if err != nil || replayed || v != "retried" {
		t.Fatalf("the retry: %q, replayed %v, %v; want it to run", v, replayed, err)
	}
}

// TestTxRenewalsDoNotStarveBehindTheirWork: on a pool of two connections,
// a transactional work that runs past three leases (so its claim must be
// renewed) holds one for its transaction while everything else takes
// whatever the pool has left; its renewals do not wait behind them, and
// it commits its row with its outcome. A claim that finds no connection
// free meanwhile fails by its deadline, and the store's log says the pool
// is too small, naming SetMaxOpenConns.
func TestTxRenewalsDoNotStarveBehindTheirWork(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	srv := testenv.MySQL(t)
	admin := newDB(t, srv.DSN, 2, nil)
	opt := table(t, admin)
	pool := newDB(t, srv.DSN, 2, nil)
	var storeLogs guardtest.Log
	s, err := New(pool, opt, WithLogger(storeLogs.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	orders := strings.TrimSuffix(tableOf(s), "`records`") + "`orders`"
	if _, err := admin.ExecContext(t.Context(), `CREATE TABLE `+orders+` (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(255) NOT NULL, who VARCHAR(64) NOT NULL) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	g, err := middleware.New(s, middleware.WithLogger(discard()), middleware.WithLeaseTTL(lease), middleware.WithOpTimeout(lease))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var (
		taken   []*sql.Conn
		claimed error
	)
	v, _, err := middleware.Do(ctx, g, "long", "payload", func(ctx context.Context) (string, error) {
		if err := insertOrder(ctx, orders, "long"); err != nil {
			return "", err
		}
		// Everything else takes what the pool has left.
		for {
			cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			c, err := pool.Conn(cctx)
			cancel()
			if err != nil {
				break
			}
			taken = append(taken, c)
		}
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, _, claimed = s.Claim(cctx, "other", fp, time.Minute)
		cancel()
		// Past three leases: renewals are due all along.
		select {
		case <-time.After(3 * lease):
		case <-ctx.Done():
			return "", context.Cause(ctx)
		}
		return "done", nil
	})
	for _, c := range taken {
		_ = c.Close()
	}
	if err != nil || v != "done" {
		t.Fatalf("the long work: %q, %v; want it done and committed", v, err)
	}
	if who := orderRows(t, admin, orders, "long"); len(who) != 1 {
		t.Fatalf("rows of long: %v; want one", who)
	}
	if idemkit.CodeOf(claimed) != idemkit.CodeNetworkTimeout || !strings.Contains(claimed.Error(), "pool is too small") {
		t.Fatalf("the claim on the full pool: %v; want a timeout saying the pool is too small", claimed)
	}
	if l := storeLogs.String(); !strings.Contains(l, "pool is too small") || !strings.Contains(l, "SetMaxOpenConns") {
		t.Fatalf("the store's log does not name the pool as too small: %q", l)
	}
}

// TestTxIsolationLevels: at each isolation level WithTxIsolation allows,
// work that writes in its transaction and runs past renewals of its lease
// commits its row with its outcome, and a duplicate replays it.
func TestTxIsolationLevels(t *testing.T) {
	t.Parallel()
	srv := testenv.MySQL(t)
	admin := newDB(t, srv.DSN, 2, nil)
	for _, level := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable} {
		t.Run(level.String(), func(t *testing.T) {
			opt := table(t, admin)
			s, err := New(newDB(t, srv.DSN, 4, nil), opt, WithTxIsolation(level))
			if err != nil {
				t.Fatal(err)
			}
			orders := strings.TrimSuffix(tableOf(s), "`records`") + "`orders`"
			if _, err := admin.ExecContext(t.Context(), `CREATE TABLE `+orders+` (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(255) NOT NULL, who VARCHAR(64) NOT NULL) ENGINE=InnoDB`); err != nil {
				t.Fatal(err)
			}
			g, err := middleware.New(s, middleware.WithLogger(discard()), middleware.WithLeaseTTL(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			work := func(ctx context.Context) (string, error) {
				if err := insertOrder(ctx, orders, "first"); err != nil {
					return "", err
				}
				time.Sleep(time.Second) // past three renewals
				return "order-1", nil
			}
			for i, wantReplay := range []bool{false, true} {
				v, replayed, err := middleware.Do(t.Context(), g, "k", "payload", work)
				if err != nil || replayed != wantReplay || v != "order-1" {
					t.Fatalf("call %d: %q, replayed %v, %v", i, v, replayed, err)
				}
			}
			if who := orderRows(t, admin, orders, "k"); len(who) != 1 {
				t.Fatalf("rows of k: %v; want one", who)
			}
		})
	}
}
