package httpsuite

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/idemkit/idemkit/nethttp"
)

// The cases of which answers are recorded, and what a replay carries for
// the client to act on.

// answerPath is the app's path that answers status with the response
// headers set (name, value pairs), on its first execution only when once.
func answerPath(status int, once bool, set ...string) string {
	q := url.Values{"status": {strconv.Itoa(status)}}
	if once {
		q.Set("once", "1")
	}
	for i := 0; i+1 < len(set); i += 2 {
		q.Add("set", set[i]+":"+set[i+1])
	}
	return "/orders?" + q.Encode()
}

// testTryAgainAnswersNotRecorded: an answer that asks the client to send
// the request again (429 with Retry-After, 408, 425, 428, 401 with a
// challenge, 503, a 4xx with Retry-After) reaches the client with its
// headers and is not recorded: the retry with the same key runs the
// handler again and succeeds, and that success is what later retries get.
// The same holds under a policy that records 5xx, unless it records these
// answers too.
func testTryAgainAnswersNotRecorded(t *testing.T, s *suite) {
	for _, c := range []struct {
		status int
		header []string // name, value pairs the answer carries
		policy *nethttp.StorePolicy
	}{
		{status: http.StatusTooManyRequests, header: []string{"Retry-After", "7"}},
		{status: http.StatusTooManyRequests},
		{status: http.StatusRequestTimeout},
		{status: http.StatusTooEarly},
		{status: http.StatusPreconditionRequired},
		{status: http.StatusUnauthorized, header: []string{"WWW-Authenticate", `Bearer realm="orders"`}},
		{status: http.StatusBadRequest, header: []string{"Retry-After", "3"}},
		{status: http.StatusConflict, header: []string{"Retry-After", "Wed, 21 Oct 2037 07:28:00 GMT"}},
		{status: http.StatusServiceUnavailable, header: []string{"Retry-After", "1"},
			policy: &nethttp.StorePolicy{Success: true, Redirection: true, ClientError: true, ServerError: true}},
		{status: http.StatusTooManyRequests, header: []string{"Retry-After", "7"},
			policy: &nethttp.StorePolicy{Success: true, Redirection: true, ClientError: true, ServerError: true, Panic: true}},
	} {
		var opts []nethttp.Option
		if c.policy != nil {
			opts = append(opts, nethttp.WithStorePolicy(*c.policy))
		}
		srv := s.serve(t, nil, opts...)
		req := request{key: []string{"k"}, path: answerPath(c.status, true, c.header...), body: payment}
		first := srv.do(t, req)
		if first.status != c.status || first.replayed() {
			t.Fatalf("%d: first answer %d replayed=%v", c.status, first.status, first.replayed())
		}
		for i := 0; i+1 < len(c.header); i += 2 {
			if got := first.header.Get(c.header[i]); got != c.header[i+1] {
				t.Fatalf("%d: %s %q; want %q delivered", c.status, c.header[i], got, c.header[i+1])
			}
		}
		retry := srv.do(t, req)
		if retry.status != http.StatusCreated || retry.replayed() {
			t.Fatalf("%d: retry %d replayed=%v; want the handler run again, and succeed", c.status, retry.status, retry.replayed())
		}
		if again := srv.do(t, req); !again.replayed() || again.status != http.StatusCreated || again.body != retry.body {
			t.Fatalf("%d: third request %d replayed=%v; want the success replayed", c.status, again.status, again.replayed())
		}
		wantExecutions(t, srv, 2)
	}

	// A 401 to a request without credentials: the retry with them runs.
	srv := s.serve(t, nil)
	req := request{key: []string{"k"}, path: answerPath(http.StatusUnauthorized, true, "WWW-Authenticate", "Bearer"), body: payment}
	if r := srv.do(t, req); r.status != http.StatusUnauthorized {
		t.Fatalf("anonymous: %d; want 401", r.status)
	}
	req.header = map[string]string{"Authorization": "Bearer alice-token"}
	if r := srv.do(t, req); r.status != http.StatusCreated || r.replayed() {
		t.Fatalf("with credentials: %d replayed=%v; want the handler run", r.status, r.replayed())
	}
	wantExecutions(t, srv, 2)
}

// testTryAgainRecordedWhenThePolicySaysSo: under a policy with TryAgain,
// a 429 is recorded and replayed, with its Retry-After.
func testTryAgainRecordedWhenThePolicySaysSo(t *testing.T, s *suite) {
	srv := s.serve(t, nil, nethttp.WithStorePolicy(nethttp.StorePolicy{Success: true, ClientError: true, TryAgain: true}))
	req := request{key: []string{"k"}, path: answerPath(http.StatusTooManyRequests, true, "Retry-After", "7"), body: payment}
	first := srv.do(t, req)
	again := srv.do(t, req)
	if !again.replayed() || again.status != http.StatusTooManyRequests || again.body != first.body || again.header.Get("Retry-After") != "7" {
		t.Fatalf("retry: %d replayed=%v Retry-After %q; want the 429 replayed with Retry-After: 7", again.status, again.replayed(), again.header.Get("Retry-After"))
	}
	wantExecutions(t, srv, 1)
}

// testReplayCarriesWhatTheClientNeeds: a recorded answer is replayed with
// the headers a client needs to act on it, under the default allow-list:
// where the created resource is (Location, Content-Location), when to
// follow a redirect (Retry-After), what a 403 asks for
// (WWW-Authenticate), what a 405 allows (Allow), what a 415 accepts
// (Accept-Patch, Accept-Post, Accept-Encoding).
func testReplayCarriesWhatTheClientNeeds(t *testing.T, s *suite) {
	srv := s.serve(t, nil)
	// The 303 itself is what is checked, not where it leads.
	srv.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for i, c := range []struct {
		status int
		header []string
	}{
		{http.StatusCreated, []string{"Content-Location", "/orders/1/receipt"}},
		{http.StatusSeeOther, []string{"Location", "/orders/1", "Retry-After", "2"}},
		{http.StatusForbidden, []string{"WWW-Authenticate", `Bearer error="insufficient_scope", scope="orders:write"`}},
		{http.StatusMethodNotAllowed, []string{"Allow", "GET, PUT"}},
		{http.StatusUnsupportedMediaType, []string{"Accept-Patch", "application/merge-patch+json", "Accept-Post", "application/json", "Accept-Encoding", "gzip"}},
	} {
		req := request{key: []string{"k" + strconv.Itoa(i)}, path: answerPath(c.status, false, c.header...), body: payment}
		first := srv.do(t, req)
		again := srv.do(t, req)
		if first.status != c.status || !again.replayed() || again.status != c.status {
			t.Fatalf("%d: first %d, retry %d replayed=%v; want it recorded and replayed", c.status, first.status, again.status, again.replayed())
		}
		for j := 0; j+1 < len(c.header); j += 2 {
			if got := again.header.Get(c.header[j]); got != c.header[j+1] {
				t.Fatalf("%d: replayed %s %q; want %q", c.status, c.header[j], got, c.header[j+1])
			}
		}
	}
	wantExecutions(t, srv, 5)
}
