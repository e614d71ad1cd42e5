package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
)

// TestInspectPrintsSteps: a claim's recorded steps are printed with their
// names and sizes and the limits they count against, their results (a
// short prefix, text quoted, other bytes in base64) only with -response;
// a record without steps prints none.
func TestInspectPrintsSteps(t *testing.T) {
	in := middleware.Inspection{
		RecordKey: "idempotency::k", State: store.StateClaimed, Algorithm: "http-v2", Fence: 7,
		Steps: []middleware.InspectedStep{
			{Name: "reserve", Size: 5, Result: []byte("res_1")},
			{Name: "charge", Size: 3, Result: []byte{0, 1, 2}},
			{Name: "mail\x1b[2J", Size: 60, Result: []byte(strings.Repeat("é", 30))},
		},
	}
	var out bytes.Buffer
	if err := newRecord(in, true).writeText(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"steps       3 of at most 32, 89 of at most 65536 bytes",
		`step 0      reserve, 5 bytes: "res_1"` + "\n",
		"step 1      charge, 3 bytes: AAEC (base64)\n",
		`step 2      "mail\x1b[2J", 60 bytes: "` + strings.Repeat("é", 24) + `"...` + "\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("inspect -response printed\n%s\nwithout %q", out.String(), want)
		}
	}
	out.Reset()
	noResults := in
	noResults.Steps = []middleware.InspectedStep{{Name: "reserve", Size: 5}}
	if err := newRecord(noResults, false).writeText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "step 0      reserve, 5 bytes\n") || strings.Contains(out.String(), "res_1") {
		t.Fatalf("inspect printed\n%s\nwant the step's name and size, without its result", out.String())
	}

	b, err := json.Marshal(newRecord(in, true))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Steps []struct {
			Name   string `json:"name"`
			Size   int    `json:"size"`
			Result *struct {
				Text   *string `json:"text"`
				Base64 *string `json:"base64"`
			} `json:"result"`
		} `json:"steps"`
		StepBytes    int `json:"step_bytes"`
		MaxSteps     int `json:"max_steps"`
		MaxStepBytes int `json:"max_step_bytes"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Steps) != 3 || got.Steps[0].Name != "reserve" || got.Steps[0].Size != 5 || got.Steps[0].Result == nil || *got.Steps[0].Result.Text != "res_1" ||
		got.Steps[1].Result.Base64 == nil || *got.Steps[1].Result.Base64 != "AAEC" || got.StepBytes != 89 || got.MaxSteps != store.MaxSteps || got.MaxStepBytes != store.MaxStepBytes {
		t.Fatalf("inspect -json -response: %s", b)
	}

	b, _ = json.Marshal(newRecord(middleware.Inspection{State: store.StateCompleted}, false))
	if strings.Contains(string(b), "step") {
		t.Fatalf("a record without steps: %s; want no step fields", b)
	}
	out.Reset()
	_ = newRecord(middleware.Inspection{State: store.StateCompleted}, false).writeText(&out)
	if strings.Contains(out.String(), "step") {
		t.Fatalf("a record without steps printed\n%s", out.String())
	}
}

// TestInspectShowsARunningClaimsSteps runs work of two steps through a
// guard on every backend whose engine records steps, and inspects its key
// with the tool while the claim runs.
func TestInspectShowsARunningClaimsSteps(t *testing.T) {
	eachBackend(t, func(t *testing.T, e env) {
		if _, ok := e.store.(store.Stepper); !ok {
			t.Skipf("%T records no steps (it is not a store.Stepper)", e.store)
		}
		g := e.guard(t)
		var stdout, stderr bytes.Buffer
		code := -1
		_, err := g.Execute(t.Context(), "stepped", order, func(ctx context.Context) (middleware.Result, error) {
			for _, s := range []struct{ name, result string }{{"reserve", "res_1"}, {"charge", "\x00\x01\x02"}} {
				if _, err := middleware.Step(ctx, s.name, func(context.Context) ([]byte, error) { return []byte(s.result), nil }); err != nil {
					return middleware.Result{}, err
				}
			}
			code = run(ctx, e.args("inspect", "-key", "stepped", "-response"), &stdout, &stderr)
			return middleware.Result{Value: []byte("done")}, nil
		})
		if err != nil || code != exitOK {
			t.Fatalf("Execute: %v; inspect exit %d, stderr %s", err, code, stderr.String())
		}
		for _, want := range []string{
			"state       claimed\n",
			"steps       2 of at most 32, 21 of at most 65536 bytes",
			`step 0      reserve, 5 bytes: "res_1"` + "\n",
			"step 1      charge, 3 bytes: AAEC (base64)\n",
		} {
			if !strings.Contains(stdout.String(), want) {
				t.Fatalf("inspect printed\n%s\nwithout %q", stdout.String(), want)
			}
		}
	})
}
