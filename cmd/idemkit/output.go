package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
)

// record is what inspect prints: the JSON of the operators' HTTP handler
// (nethttp.NewAdmin), field for field, the response decoded, and a running
// claim's steps.
type record struct {
	RecordKey     string    `json:"record_key"`
	State         string    `json:"state"`
	Algorithm     string    `json:"algorithm"`
	Bound         bool      `json:"bound"`
	Fence         uint64    `json:"fence"`
	Created       time.Time `json:"created"`
	Expires       time.Time `json:"expires"`
	Size          int       `json:"size"`
	Sealed        bool      `json:"sealed"`
	Response      *[]byte   `json:"response,omitempty"`
	ResponseError string    `json:"response_error,omitempty"`

	// The response decoded, by the adapter that recorded it: one of them,
	// or none when the tool cannot decode it ("response" holds it).
	HTTP  *httpResponse `json:"http,omitempty"`
	GRPC  *grpcCall     `json:"grpc,omitempty"`
	Value *body         `json:"value,omitempty"` // Do and Execute's: the bytes the work returned

	// A claim's recorded steps (middleware.Step), with the limits they
	// count against; omitted when it has none.
	Steps        []step `json:"steps,omitempty"`
	StepBytes    int    `json:"step_bytes,omitempty"`     // the bytes its steps' names and results take
	MaxSteps     int    `json:"max_steps,omitempty"`      // store.MaxSteps
	MaxStepBytes int    `json:"max_step_bytes,omitempty"` // store.MaxStepBytes
}

// step is one recorded step of a claim.
type step struct {
	Name   string `json:"name"`
	Size   int    `json:"size"`             // its result's bytes
	Result *body  `json:"result,omitempty"` // with -response
}

// stepPrefix is how many bytes of a step's result the text form shows.
const stepPrefix = 48

// newRecord returns the printable form of in; withResponse tells whether
// the response was asked for.
func newRecord(in middleware.Inspection, withResponse bool) record {
	r := record{
		RecordKey: in.RecordKey, State: in.State.String(), Algorithm: in.Algorithm, Bound: in.Bound,
		Fence: uint64(in.Fence), Created: in.CreatedAt.UTC(), Expires: in.ExpiresAt.UTC(),
		Size: in.Size, Sealed: in.Sealed,
	}
	for _, st := range in.Steps {
		s := step{Name: st.Name, Size: st.Size}
		if withResponse && st.Result != nil {
			b := newBody(st.Result)
			s.Result = &b
		}
		r.Steps = append(r.Steps, s)
		r.StepBytes += len(st.Name) + st.Size
	}
	if len(r.Steps) > 0 {
		r.MaxSteps, r.MaxStepBytes = store.MaxSteps, store.MaxStepBytes
	}
	switch {
	case !withResponse:
	case in.Sealed && in.Response == nil:
		// This tool holds no seal keys.
		r.ResponseError = "the response is sealed, and this tool holds no seal keys to open it"
	default:
		b := in.Response
		if b == nil {
			b = []byte{}
		}
		r.Response = &b
		if in.State == store.StateCompleted || len(b) > 0 {
			r.HTTP, r.GRPC, r.Value = decodeResponse(in.Algorithm, b)
		}
	}
	return r
}

// writeText prints r as aligned lines.
func (r record) writeText(w io.Writer) error {
	yesNo := map[bool]string{true: "yes", false: "no"}
	bound := "no"
	if r.Bound {
		bound = "yes (to the credentials of the request that made it)"
	}
	alg := r.Algorithm
	if alg == "" {
		alg = "(unknown)"
	}
	lines := [][2]string{
		{"record key", quote(r.RecordKey)},
		{"state", r.State},
		{"algorithm", alg},
		{"bound", bound},
		{"fence", strconv.FormatUint(r.Fence, 10)},
		{"created", r.Created.Format(time.RFC3339Nano)},
		{"expires", r.Expires.Format(time.RFC3339Nano)},
		{"size", fmt.Sprintf("%d bytes", r.Size)},
		{"sealed", yesNo[r.Sealed]},
	}
	switch {
	case r.ResponseError != "":
		lines = append(lines, [2]string{"response", "(" + r.ResponseError + ")"})
	case r.HTTP != nil:
		lines = append(lines, r.HTTP.lines()...)
	case r.GRPC != nil:
		lines = append(lines, r.GRPC.lines()...)
	case r.Value != nil:
		lines = append(lines, r.Value.lines("response")...)
	case r.Response != nil && len(*r.Response) == 0:
		lines = append(lines, [2]string{"response", "(none)"})
	case r.Response != nil:
		lines = append(lines, [2]string{"response", fmt.Sprintf("(%d bytes this tool cannot decode; -raw writes them) %s (base64)",
			len(*r.Response), base64.StdEncoding.EncodeToString(*r.Response))})
	}
	if len(r.Steps) > 0 {
		lines = append(lines, [2]string{"steps", fmt.Sprintf("%d of at most %d, %d of at most %d bytes (recovery points: a retry resumes after the last)",
			len(r.Steps), r.MaxSteps, r.StepBytes, r.MaxStepBytes)})
		for i, s := range r.Steps {
			line := fmt.Sprintf("%s, %d bytes", quote(s.Name), s.Size)
			if s.Result != nil {
				line += ": " + s.Result.prefix(stepPrefix)
			}
			lines = append(lines, [2]string{fmt.Sprintf("step %d", i), line})
		}
	}
	return writeLines(w, lines)
}

// writeLines writes each pair as a line: the name in a column, then the
// value, which may span lines (a body).
func writeLines(w io.Writer, lines [][2]string) error {
	for _, l := range lines {
		if _, err := fmt.Fprintf(w, "%-11s %s\n", l[0], l[1]); err != nil {
			return err
		}
	}
	return nil
}

// forgetResult is what forget prints with -json.
type forgetResult struct {
	Deleted bool   `json:"deleted"`
	State   string `json:"state,omitempty"` // what was deleted: completed (the next request runs the work again), not-replayable or claimed
}

// sweepResult is what sweep prints with -json.
type sweepResult struct {
	Deleted int    `json:"deleted"`
	Note    string `json:"note,omitempty"`
}

// writeJSON prints v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// quote returns s as it is when it is printable text, else quoted with Go
// escapes, so that no key can send control sequences to a terminal.
func quote(s string) string {
	if s == "" || !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
