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
)

// record is what inspect prints: the JSON of the operators' HTTP handler
// (nethttp.NewAdmin), field for field.
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
}

// newRecord returns the printable form of in; withResponse tells whether
// the response was asked for.
func newRecord(in middleware.Inspection, withResponse bool) record {
	r := record{
		RecordKey: in.RecordKey, State: in.State.String(), Algorithm: in.Algorithm, Bound: in.Bound,
		Fence: uint64(in.Fence), Created: in.CreatedAt.UTC(), Expires: in.ExpiresAt.UTC(),
		Size: in.Size, Sealed: in.Sealed,
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
	case r.Response != nil:
		lines = append(lines, [2]string{"response", base64.StdEncoding.EncodeToString(*r.Response) + " (base64)"})
	}
	for _, l := range lines {
		if _, err := fmt.Fprintf(w, "%-11s %s\n", l[0], l[1]); err != nil {
			return err
		}
	}
	return nil
}

// forgetResult is what forget prints with -json.
type forgetResult struct {
	Deleted bool `json:"deleted"`
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
