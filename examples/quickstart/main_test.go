package main

import (
	"strings"
	"testing"
)

// TestQuickstartRunsEachOrderOnceAndPrintsWhatClientsGot runs the
// quickstart and checks what its clients got and what it printed: the storm
// ran its order once and its duplicates got the replay, the duplicate that
// would not wait got 409, the replay and the refusal are shown with their
// headers and bodies, and the Transport's retry after the lost answer got
// the replay.
func TestQuickstartRunsEachOrderOnceAndPrintsWhatClientsGot(t *testing.T) {
	var out strings.Builder
	sum, err := run(t.Context(), &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := summary{
		stormExecuted: 1, stormReplayed: stormSize - 1,
		conflict: 409, conflictKind: "idempotency-key-in-progress",
		replay: 201, refusal: 422, refusalKind: "idempotency-key-reused",
		lostAttempts: 2, lostReplayed: true,
		executions: 3,
	}
	if sum != want {
		t.Fatalf("summary %+v; want %+v\n%s", sum, want, out.String())
	}
	for _, line := range []string{
		"answers: 201 executed ×1, 201 replayed ×19\n",
		"the duplicate: 409 idempotency-key-in-progress, Retry-After: 1\n",
		"the first:     201 executed\n",
		"a later retry: 201 replayed\n",
		"     HTTP/1.1 201 Created\n",
		"     Idempotent-Replayed: true\n",
		"     Location: /orders/1\n",
		"     {\"order\":1,\"request\":{\"item\":\"book\",\"quantity\":1}}\n",
		"     HTTP/1.1 422 Unprocessable Entity\n",
		"     Content-Type: application/problem+json\n",
		`"type":"urn:idemkit:problem:idempotency-key-reused"`,
		"              201 Created, Idempotent-Replayed: true\n",
		"the client got 201 Created: {\"order\":3,",
		"27 requests, 3 orders, 3 executions: each order ran exactly once\n",
		"  make serve\n",
		"  curl -si localhost:8080/orders -H 'Idempotency-Key: try-1'",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("the output lacks %q", line)
		}
	}
	if got := strings.Count(out.String(), "the order ran once\n"); got != 3 {
		t.Errorf("%d scenarios say their order ran once; want 3", got)
	}
	if t.Failed() {
		t.Logf("the output:\n%s", out.String())
	}
}
