package dynamostore_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/dynamostore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// conn is the HTTP side of a test client: it counts the requests the
// client sends, and Break makes every later one dial a port where nothing
// listens (a real refused connection, as a client cut off from DynamoDB
// meets).
type conn struct {
	requests atomic.Int64
	mu       sync.Mutex
	targets  map[string]int // requests by API operation (X-Amz-Target), since the last take
	// loseAnswer, once set, makes the next request whose body holds it
	// reach the server and its answer be lost (a reset connection), once.
	loseAnswer atomic.Pointer[string]
	broken     atomic.Bool
	closed     string // a loopback address nothing listens on
	idle       func() // closes the idle connections
}

func (c *conn) RoundTrips() int { return int(c.requests.Load()) }

func (c *conn) Break() {
	c.broken.Store(true)
	c.idle()
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// countingTransport counts each request it sends.
type countingTransport struct {
	c    *conn
	next http.RoundTripper
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.c.requests.Add(1)
	op := r.Header.Get("X-Amz-Target")
	op = op[strings.LastIndexByte(op, '.')+1:]
	t.c.mu.Lock()
	if t.c.targets == nil {
		t.c.targets = map[string]int{}
	}
	t.c.targets[op]++
	t.c.mu.Unlock()
	if lose := t.c.loseAnswer.Load(); lose != nil && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(*lose)) && t.c.loseAnswer.CompareAndSwap(lose, nil) {
			resp, err := t.next.RoundTrip(r)
			if err == nil {
				resp.Body.Close()
			}
			return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
		}
	}
	return t.next.RoundTrip(r)
}

// take returns the requests sent since the last call, in total and by
// operation ("GetItem=1 PutItem=1"), and resets them.
func (c *conn) take() (total int, by string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.targets))
	for op, n := range c.targets {
		total += n
		names = append(names, op+"="+strconv.Itoa(n))
	}
	sort.Strings(names)
	c.targets = map[string]int{}
	return total, strings.Join(names, " ")
}

// newClient returns a real client of the DynamoDB endpoint url, with dummy
// static credentials and a region, on an HTTP transport of its own.
func newClient(t testing.TB, url string) (*dynamodb.Client, *conn) {
	t.Helper()
	c := &conn{closed: closedAddr(t)}
	d := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{
		MaxIdleConnsPerHost: 64,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if c.broken.Load() {
				addr = c.closed
			}
			return d.DialContext(ctx, network, addr)
		},
	}
	c.idle = tr.CloseIdleConnections
	t.Cleanup(tr.CloseIdleConnections)
	client := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(url),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, nil
		}),
		HTTPClient: &http.Client{Transport: countingTransport{c: c, next: tr}},
	})
	return client, c
}

// clock is a store clock that stands still until a test moves it.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newTable creates a table of the test's own on the endpoint of client
// and returns the option that names it, and its name.
func newTable(t testing.TB, client *dynamodb.Client) (dynamostore.Option, string) {
	t.Helper()
	name := testenv.Name(t)
	opt := dynamostore.WithTable(name)
	if err := dynamostore.CreateTable(t.Context(), client, opt); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	return opt, name
}

// newStore returns a store on client with opts.
func newStore(t testing.TB, client *dynamodb.Client, opts ...dynamostore.Option) *dynamostore.Store {
	t.Helper()
	s, err := dynamostore.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// immortal returns the partition keys of the items of table without the
// TTL attribute: there must be none.
func immortal(client *dynamodb.Client, table string) func(context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		var keys []string
		p := dynamodb.NewScanPaginator(client, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				return nil, err
			}
			for _, it := range out.Items {
				if _, ok := it[dynamostore.AttrExpireAt].(*types.AttributeValueMemberN); !ok {
					pk, _ := it["pk"].(*types.AttributeValueMemberS)
					if pk != nil {
						keys = append(keys, pk.Value)
					} else {
						keys = append(keys, "?")
					}
				}
			}
		}
		return keys, nil
	}
}
