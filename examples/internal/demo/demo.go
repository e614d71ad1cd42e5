// Package demo is the demo service that every adapter's example serves
// with the same contract: POST /orders (guarded, key required), POST /notes
// (guarded, key optional) and GET /stats (not guarded); the net/http demo
// also serves POST /checkout, a handler of three steps with recovery
// points ([Service.Checkout]).
//
// The business handler counts its executions and answers 201 Created with
// Location: /orders/<n> and {"order": <n>, "request": <the request body>}.
// Query parameters make it misbehave on purpose: sleep=<duration> (before
// answering), status=<code> (answer that code instead, still counting the
// execution), panic=1, bytes=<n> (n bytes of padding in the body), stream=1
// (flush the body in chunks).
//
// Every route sits behind [Authenticate], which knows the demo's tokens
// ([Principal]), and the idempotency keys are scoped by principal ([Scope]):
// one caller's key never replays another caller's response, and a caller
// whose token was refreshed between retries still gets its replay.
//
// It imports no backend's SDK, so a program on the memory backend (the
// quickstart) builds from the root module alone; the backend flags and
// the programs' plumbing are in package cli.
package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Service is the demo's business logic and its execution counters.
type Service struct {
	// Faults enables the checkout's crash switch (see [Service.Checkout]).
	Faults bool

	executions atomic.Int64
	checkout   checkoutStats
}

// Executions returns how many times the business handler ran.
func (s *Service) Executions() int64 { return s.executions.Load() }

// Params are the misbehaviour switches of one request, from its query.
type Params struct {
	Sleep  time.Duration
	Status int
	Panic  bool
	Bytes  int
	Stream bool
}

// ParseParams reads the query parameters sleep, status, panic, bytes and
// stream. Malformed values are ignored.
func ParseParams(q map[string][]string) Params {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	p := Params{Status: http.StatusCreated}
	if d, err := time.ParseDuration(get("sleep")); err == nil && d > 0 {
		p.Sleep = min(d, time.Minute)
	}
	if c, err := strconv.Atoi(get("status")); err == nil && c >= 200 && c <= 599 {
		p.Status = c
	}
	p.Panic = get("panic") == "1"
	if n, err := strconv.Atoi(get("bytes")); err == nil && n > 0 {
		p.Bytes = min(n, 64<<20)
	}
	p.Stream = get("stream") == "1"
	return p
}

// Order is the business handler's answer.
type Order struct {
	Order   int64           `json:"order"`
	Request json.RawMessage `json:"request"`
	Padding string          `json:"padding,omitempty"`
}

// Execute runs the business logic once: it counts the execution, sleeps
// if asked (until the request's ctx ends), panics if asked, and returns the
// status, the Location and the body to answer.
func (s *Service) Execute(r *http.Request, p Params) (status int, location string, body []byte) {
	n := s.executions.Add(1)
	raw, _ := io.ReadAll(r.Body)
	if p.Sleep > 0 {
		t := time.NewTimer(p.Sleep)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	if p.Panic {
		panic(fmt.Sprintf("demo: order %d panicked on purpose", n))
	}
	req := json.RawMessage(raw)
	if !json.Valid(raw) {
		req, _ = json.Marshal(string(raw))
	}
	b, _ := json.Marshal(Order{Order: n, Request: req, Padding: strings.Repeat("x", p.Bytes)})
	return p.Status, fmt.Sprintf("/orders/%d", n), append(b, '\n')
}

// Business is the net/http business handler (without idempotency).
func (s *Service) Business() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := ParseParams(r.URL.Query())
		status, location, body := s.Execute(r, p)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", location)
		w.WriteHeader(status)
		if !p.Stream {
			_, _ = w.Write(body)
			return
		}
		rc := http.NewResponseController(w)
		for len(body) > 0 {
			n := min(len(body), 16)
			_, _ = w.Write(body[:n])
			_ = rc.Flush()
			body = body[n:]
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// Stats is what GET /stats answers: the business handler's executions,
// and, once a checkout ran a step here, the checkouts finished here beside
// each of their steps' executions.
type Stats struct {
	Executions int64            `json:"executions"`
	Checkouts  int64            `json:"checkouts,omitempty"`
	Steps      map[string]int64 `json:"steps,omitempty"`
}

// Stats answers GET /stats with [Stats].
func (s *Service) Stats() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		st := Stats{Executions: s.Executions(), Checkouts: s.checkout.done.Load()}
		steps := map[string]int64{
			StepReserve: s.checkout.reserve.Load(),
			StepCharge:  s.checkout.charge.Load(),
			StepEmail:   s.checkout.email.Load(),
		}
		if steps[StepReserve]+steps[StepCharge]+steps[StepEmail] > 0 {
			st.Steps = steps
		}
		_ = json.NewEncoder(w).Encode(st)
	})
}
