package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // a failure, or (inspect) no record
	exitUsage   = 2 // bad command line: flags, URL, key, namespace, table or collection
)

// Defaults of the flags.
const (
	defaultNamespace = "idempotency"
	defaultTimeout   = time.Minute
)

// urlEnv is the environment variable -url defaults to, so that a URL with
// a password need not appear on the command line.
const urlEnv = "IDEMKIT_URL"

const usageText = `usage:
  idemkit inspect -url URL -key KEY [-scope SCOPE] [-namespace NS] [-response | -raw] [-json]
  idemkit forget  -url URL -key KEY [-scope SCOPE] [-namespace NS] [-force] [-json]
  idemkit list    -url URL [-scope SCOPE | -all-scopes] [-key-prefix P] [-namespace NS] [-limit N] [-after CURSOR] [-json]
  idemkit sweep   -url URL [-json]
  store options, as the application has them: -prefix (Redis), -table (PostgreSQL, MySQL, DynamoDB), -collection (Firestore)

URL (default: $IDEMKIT_URL):
  redis://[user:pass@]host:port[/db]                       one Redis node (rediss:// for TLS)
  redis+cluster://[user:pass@]host:port,host:port          Redis Cluster (rediss+cluster://)
  redis+sentinel://[user:pass@]host:port,.../master[/db]   Sentinel failover (rediss+sentinel://)
  postgres://... or postgresql://...                       PostgreSQL (-table)
  mysql://[user:pass@]host[:port]/database[?params]        MySQL or MariaDB (-table)
  firestore://project-id[/database]                        Firestore (-collection; FIRESTORE_EMULATOR_HOST is followed)
  dynamodb://[region][?endpoint=URL]                       DynamoDB (-table; credentials from the AWS configuration)

Run "idemkit <command> -h" for the flags of a command.
-key takes the key as the client sent it, in the header's string form ("k1",
quotes included) or bare (k1).
inspect -response shows the recorded response decoded (HTTP: status, headers,
body; gRPC: code and message, or the response message), and the start of each
recorded step's result (a running claim's steps are always listed); -raw writes
the response's bytes.
forget deletes an outcome: the next request with the key runs the work again.
It refuses a claim whose lease is live (its request may still be running)
unless -force is given.
list shows the live records of a scope (-scope, none by default), of every
scope (-all-scopes) or of the keys starting with -key-prefix, -limit at a time
(default 100); it prints the -after cursor that continues it.
Exit status: 0 done, 1 failed, (inspect) no record or (forget) a live claim, 2 bad command line.
`

// command is one parsed command line.
type command struct {
	name       string
	url        string
	key        string
	scope      string
	namespace  string
	response   bool
	raw        bool // inspect: the response's bytes
	force      bool
	allScopes  bool   // list
	keyPrefix  string // list
	limit      int    // list
	after      string // list
	json       bool
	table      string // PostgreSQL, MySQL
	collection string // Firestore
	prefix     string // Redis
	timeout    time.Duration
}

// usageError is a bad command line (exit status 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// run runs the command line args (without the program's name), writing
// results to stdout and diagnostics to stderr, and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usageText)
		return exitOK
	case "inspect", "forget", "list", "sweep":
	default:
		fmt.Fprintf(stderr, "idemkit: unknown command %q\n\n%s", args[0], usageText)
		return exitUsage
	}
	c, err := parse(args[0], args[1:], stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
		return exitUsage // the flag set has said why
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := c.run(ctx, stdout, stderr); err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "idemkit %s: %v\n", c.name, err)
			return exitUsage
		}
		if errors.Is(err, errNotFound) {
			return exitFailure // already reported
		}
		fmt.Fprintf(stderr, "idemkit %s: %s\n", c.name, strings.TrimPrefix(err.Error(), "idemkit: "))
		return exitFailure
	}
	return exitOK
}

// parse parses the flags of the command name.
func parse(name string, args []string, stderr io.Writer) (*command, error) {
	c := &command{name: name}
	fs := flag.NewFlagSet("idemkit "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.url, "url", os.Getenv(urlEnv), "the backend's `URL` (default: $"+urlEnv+"); see idemkit help")
	if name == "inspect" || name == "forget" {
		fs.StringVar(&c.key, "key", "", "the idempotency `key`, as the client sent it: in the header's string form (\"k1\", quotes included) or bare (k1)")
	}
	if name != "sweep" {
		fs.StringVar(&c.scope, "scope", "", "the key's `scope` (the tenant or principal the middleware's scope hook named; none by default)")
		fs.StringVar(&c.namespace, "namespace", defaultNamespace, "the guard's `namespace` (middleware.WithNamespace)")
	}
	if name == "inspect" {
		fs.BoolVar(&c.response, "response", false, "show the recorded response too, decoded (HTTP: status, headers, body; gRPC: code and message); it may hold personal data")
		fs.BoolVar(&c.raw, "raw", false, "write the recorded response's bytes, as stored, to stdout and nothing else")
	}
	if name == "list" {
		fs.BoolVar(&c.allScopes, "all-scopes", false, "list the records of every scope of the namespace")
		fs.StringVar(&c.keyPrefix, "key-prefix", "", "list only the keys that start with this `prefix` (in -scope)")
		fs.IntVar(&c.limit, "limit", 100, fmt.Sprintf("the most `records` to list (1 to %d)", store.MaxListLimit))
		fs.StringVar(&c.after, "after", "", "continue a listing after this `cursor`, which the previous list printed")
	}
	if name == "forget" {
		fs.BoolVar(&c.force, "force", false, "delete the key's claim even while its lease is live: its request, if it still runs, cannot record its outcome, and a retry runs it a second time")
	}
	fs.BoolVar(&c.json, "json", false, "print JSON instead of text")
	fs.StringVar(&c.table, "table", "", "PostgreSQL, MySQL and DynamoDB only: the record `table`, for PostgreSQL and MySQL \"table\" or \"schema.table\" (pgstore.WithTable, mysqlstore.WithTable, dynamostore.WithTable; default idemkit_records)")
	fs.StringVar(&c.prefix, "prefix", "", "Redis only: the store's key `prefix` (redisstore.WithKeyPrefix; default none)")
	fs.StringVar(&c.collection, "collection", "", "Firestore only: the record `collection` (firestorestore.WithCollection; default idemkit_records)")
	fs.DurationVar(&c.timeout, "timeout", defaultTimeout, "how long the command may take, backend calls included")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage of idemkit %s:\n", name)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c.key = headerKey(c.key)
	bad := func(format string, args ...any) (*command, error) {
		fmt.Fprintf(stderr, "idemkit %s: %s\n", name, fmt.Sprintf(format, args...))
		fs.Usage()
		return nil, &usageError{}
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q (flags go before arguments, and %s takes none)", fs.Arg(0), name)
	case c.url == "":
		return bad("-url is required (or set $%s)", urlEnv)
	case (name == "inspect" || name == "forget") && c.key == "":
		return bad("-key is required and must not be empty")
	case c.raw && (c.response || c.json):
		return bad("-raw writes the response's bytes alone: drop -response and -json")
	case c.allScopes && (c.scope != "" || c.keyPrefix != ""):
		return bad("-all-scopes lists every scope: drop -scope and -key-prefix")
	case name == "list" && (c.limit < 1 || c.limit > store.MaxListLimit):
		return bad("-limit must be 1 to %d", store.MaxListLimit)
	case c.timeout <= 0:
		return bad("-timeout must be positive")
	}
	return c, nil
}

// errNotFound is returned by inspect when the key has no record, after it
// said so.
var errNotFound = errors.New("no record")

// run runs the parsed command.
func (c *command) run(ctx context.Context, stdout, stderr io.Writer) error {
	t, err := parseTarget(c.url)
	if err != nil {
		return err
	}
	if err := c.checkFlags(t.kind); err != nil {
		return err
	}
	if c.name == "sweep" && (t.kind == kindRedis || t.kind == kindDynamo) {
		msg := "Redis expires every record by itself (each key carries its TTL): there is nothing to sweep"
		if t.kind == kindDynamo {
			msg = "DynamoDB deletes every expired record by itself (TTL on expireAt): there is nothing to sweep"
		}
		if c.json {
			return writeJSON(stdout, sweepResult{Deleted: 0, Note: msg})
		}
		fmt.Fprintln(stdout, msg)
		return nil
	}
	b, err := t.open(ctx, c)
	if err != nil {
		return err
	}
	defer b.close()
	switch c.name {
	case "sweep":
		return c.sweep(ctx, b, stdout)
	case "inspect":
		return c.inspect(ctx, b, stdout, stderr)
	case "list":
		return c.list(ctx, b, stdout)
	default:
		return c.forget(ctx, b, stdout)
	}
}

// checkFlags refuses the flags of other backends.
func (c *command) checkFlags(k kind) error {
	switch {
	case c.table != "" && k != kindPostgres && k != kindMySQL && k != kindDynamo:
		return usagef("-table applies to PostgreSQL, MySQL and DynamoDB URLs only")
	case c.collection != "" && k != kindFirestore:
		return usagef("-collection applies to Firestore URLs only")
	case c.prefix != "" && k != kindRedis:
		return usagef("-prefix applies to Redis URLs only")
	}
	return nil
}

// guard returns a guard over the backend with the command's namespace.
func (c *command) guard(b *backend) (*middleware.Guard, error) {
	g, err := middleware.New(b.store,
		middleware.WithNamespace(c.namespace),
		middleware.WithOpTimeout(c.timeout),
		middleware.WithLogger(slog.New(slog.DiscardHandler)))
	if idemkit.CodeOf(err) == idemkit.CodeInvalidArgument {
		return nil, usagef("-namespace: %v", err)
	}
	return g, err
}

func (c *command) inspect(ctx context.Context, b *backend, stdout, stderr io.Writer) error {
	g, err := c.guard(b)
	if err != nil {
		return err
	}
	in, found, err := g.Inspect(ctx, c.scope, c.key, c.response || c.raw)
	if err != nil {
		return keyError(err)
	}
	if !found {
		where := "without a scope"
		if c.scope != "" {
			where = "in scope " + quote(c.scope)
		}
		fmt.Fprintf(stderr, "idemkit inspect: no record for key %s %s (expired, released, forgotten or never used)\n", quote(c.key), where)
		return errNotFound
	}
	if c.raw {
		if in.Sealed && in.Response == nil {
			return errors.New("the response is sealed, and this tool holds no seal keys to open it")
		}
		_, err := stdout.Write(in.Response)
		return err
	}
	r := newRecord(in, c.response)
	if c.json {
		return writeJSON(stdout, r)
	}
	return r.writeText(stdout)
}

func (c *command) forget(ctx context.Context, b *backend, stdout io.Writer) error {
	g, err := c.guard(b)
	if err != nil {
		return err
	}
	// The record's state says what forgetting it means; reading it costs
	// a round trip, which an operator's command can afford.
	in, found, err := g.Inspect(ctx, c.scope, c.key, false)
	if err != nil {
		return keyError(err)
	}
	var opts []middleware.ForgetOption
	if c.force {
		opts = append(opts, middleware.Force())
	}
	deleted, err := g.Forget(ctx, c.scope, c.key, opts...)
	var live *middleware.LiveClaimError
	if errors.As(err, &live) {
		return fmt.Errorf("key %s is claimed by a request that may still be running, so nothing was deleted: "+
			"the claim's lease runs out at %s unless its holder renews it: a holder that is gone frees the key then. "+
			"-force deletes it anyway: if its request still runs, its outcome is not recorded and a retry runs it a second time",
			quote(c.key), live.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	if err != nil {
		return keyError(err)
	}
	state := ""
	if deleted && found {
		state = in.State.String()
	}
	if c.json {
		return writeJSON(stdout, forgetResult{Deleted: deleted, State: state})
	}
	if !deleted {
		fmt.Fprintf(stdout, "key %s had no record: nothing to forget\n", quote(c.key))
		return nil
	}
	switch {
	case found && in.State == store.StateCompleted:
		fmt.Fprintf(stdout, "forgot key %s, which had completed: its recorded response is gone, and the next request with the key "+
			"runs the work again (a second time) instead of getting that response back\n", quote(c.key))
	case found && in.State == store.StateClaimed:
		fmt.Fprintf(stdout, "forgot key %s, which a request held: if that request still runs, its outcome is not recorded, "+
			"and the next request with the key runs the work again\n", quote(c.key))
	default:
		fmt.Fprintf(stdout, "forgot key %s: the next request with the key runs the work again\n", quote(c.key))
	}
	return nil
}

func (c *command) list(ctx context.Context, b *backend, stdout io.Writer) error {
	g, err := c.guard(b)
	if err != nil {
		return err
	}
	l, err := g.List(ctx, middleware.ListQuery{
		Scope: c.scope, AllScopes: c.allScopes, KeyPrefix: c.keyPrefix, After: c.after, Limit: c.limit,
	})
	if idemkit.CodeOf(err) == idemkit.CodeInvalidArgument {
		return usagef("%s", strings.TrimPrefix(err.Error(), "idemkit: "))
	}
	if err != nil {
		return err
	}
	page := newListing(l)
	if c.json {
		return writeJSON(stdout, page)
	}
	return page.writeText(stdout)
}

func (c *command) sweep(ctx context.Context, b *backend, stdout io.Writer) error {
	n, err := b.sweep(ctx)
	if err != nil {
		// Sweep reports what it deleted also when it fails part way.
		return fmt.Errorf("deleted %d expired records, then failed: %w", n, err)
	}
	if c.json {
		return writeJSON(stdout, sweepResult{Deleted: n})
	}
	fmt.Fprintf(stdout, "deleted %d expired records\n", n)
	return nil
}

// keyError makes a key the guard refuses (empty, too long with its
// namespace and scope) a usage error.
func keyError(err error) error {
	if errors.Is(err, middleware.ErrInvalidKey) {
		return usagef("-key: %s", strings.TrimPrefix(err.Error(), middleware.ErrInvalidKey.Error()+": "))
	}
	return err
}
