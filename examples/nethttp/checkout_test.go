package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/examples/internal/demo"
	"github.com/idemkit/idemkit/examples/internal/demotest"
	"github.com/idemkit/idemkit/internal/testenv"
)

// TestCheckoutResumesOnAnotherInstanceAfterACrash runs the demo in two
// child processes with -faults on one shared Redis, PostgreSQL and
// Firestore server. POST /checkout?crash=after-reserve (then after-charge)
// to the first ends its process the moment that step is recorded; the
// same request retried on the second instance completes the checkout
// without running the recorded steps again (its GET /stats counts only the
// steps it ran, and the answer carries the first instance's reservation
// and charge), and every later retry, on either instance, replays it.
func TestCheckoutResumesOnAnotherInstanceAfterACrash(t *testing.T) {
	for _, backend := range []string{"redis", "postgres", "firestore"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			args := append(demotest.BackendArgs(t, backend), "-faults")
			survivor := demotest.StartProcess(t, "nethttp", nil, args...)
			for i, crash := range []string{"after-reserve", "after-charge"} {
				victim := demotest.StartProcess(t, "nethttp", nil, args...)
				key := fmt.Sprintf("%s-checkout-%d", testenv.Name(t), i)
				body := fmt.Sprintf(`{"item":"book","amount":"12.5%d"}`, i)
				path := "/checkout?crash=" + crash
				if a := post(t.Context(), victim.Addr, path, key, body); a.err == nil {
					t.Fatalf("%s: the crashing instance answered %d %s", crash, a.status, a.body)
				}
				if !victim.Exited(10 * time.Second) {
					t.Fatalf("%s: the instance did not end", crash)
				}
				before := stats(t, survivor.Addr)
				// The crashed instance's claim holds the key until its
				// lease runs out: the retry is refused as in progress
				// until then.
				var first answer
				deadline := time.Now().Add(time.Minute)
				for {
					first = post(t.Context(), survivor.Addr, path, key, body)
					if first.err == nil && first.status == http.StatusCreated {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: the retry never completed: %v %d %s", crash, first.err, first.status, first.body)
					}
					time.Sleep(200 * time.Millisecond)
				}
				after := stats(t, survivor.Addr)
				ran := func(step string) int64 { return after.Steps[step] - before.Steps[step] }
				want := map[string]int64{demo.StepReserve: 0, demo.StepCharge: 1, demo.StepEmail: 1}
				if crash == "after-charge" {
					want[demo.StepCharge] = 0
				}
				for step, n := range want {
					if ran(step) != n {
						t.Errorf("%s: the retry ran %s %d times; want %d (stats %+v → %+v)", crash, step, ran(step), n, before, after)
					}
				}
				if after.Checkouts-before.Checkouts != 1 {
					t.Errorf("%s: %d checkouts finished on the retry; want 1", crash, after.Checkouts-before.Checkouts)
				}
				var got demo.CheckoutAnswer
				if err := json.Unmarshal([]byte(first.body), &got); err != nil {
					t.Fatalf("%s: answer %s: %v", crash, first.body, err)
				}
				// The survivor never reserved: the reservation is the
				// crashed instance's, from its recovery point.
				if got.Reservation.ID == "" || got.Reservation.Item != "book" || got.Charge.Amount != fmt.Sprintf("12.5%d", i) || got.Email.ID == "" {
					t.Errorf("%s: answer %+v", crash, got)
				}
				if crash == "after-charge" && after.Steps[demo.StepCharge] != before.Steps[demo.StepCharge] {
					t.Errorf("%s: the charge ran again", crash)
				}
				again := demotest.StartProcess(t, "nethttp", nil, args...)
				for _, addr := range []string{survivor.Addr, again.Addr} {
					r := post(t.Context(), addr, path, key, body)
					if r.err != nil || r.status != http.StatusCreated || r.replayed != "true" || r.body != first.body {
						t.Errorf("%s: a later retry at %s: %v %d replayed=%q %s; want the replay of %s", crash, addr, r.err, r.status, r.replayed, r.body, first.body)
					}
				}
			}
		})
	}
}

type answer struct {
	status   int
	replayed string
	body     string
	err      error
}

// client sends each request on a connection of its own, so that a killed
// node's connection is never reused.
var client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// post sends POST path with key and the JSON body to addr.
func post(ctx context.Context, addr, path, key, body string) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed"), body: string(b), err: err}
}

func stats(t *testing.T, addr string) demo.Stats {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s demo.Stats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}
