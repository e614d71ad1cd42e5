package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idemkit/middleware"
)

// listing is what list prints: one page of records.
type listing struct {
	Records []listed `json:"records"`
	// Next continues the listing (-after); "" once nothing is left.
	Next string `json:"next,omitempty"`
}

// listed is one record of a listing: inspect's record without the
// response.
type listed struct {
	RecordKey string    `json:"record_key"`
	Scope     string    `json:"scope"`
	Key       string    `json:"key"`
	State     string    `json:"state"`
	Algorithm string    `json:"algorithm"`
	Bound     bool      `json:"bound"`
	Fence     uint64    `json:"fence"`
	Created   time.Time `json:"created"`
	Expires   time.Time `json:"expires"`
	Size      int       `json:"size"`
	Sealed    bool      `json:"sealed"`
}

func newListing(l middleware.Listing) listing {
	out := listing{Records: make([]listed, len(l.Records)), Next: l.Next}
	for i, in := range l.Records {
		out.Records[i] = listed{
			RecordKey: in.RecordKey, Scope: in.Scope, Key: in.Key, State: in.State.String(), Algorithm: in.Algorithm,
			Bound: in.Bound, Fence: uint64(in.Fence), Created: in.CreatedAt.UTC(), Expires: in.ExpiresAt.UTC(),
			Size: in.Size, Sealed: in.Sealed,
		}
	}
	return out
}

// writeText prints l as a table, then how to continue.
func (l listing) writeText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tEXPIRES\tSIZE\tSCOPE\tKEY")
	for _, r := range l.Records {
		size := fmt.Sprint(r.Size)
		if r.Sealed {
			size += " (sealed)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.State, r.Expires.Format(time.RFC3339), size, quote(r.Scope), quote(r.Key))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	n := fmt.Sprintf("%d records", len(l.Records))
	if len(l.Records) == 1 {
		n = "1 record"
	}
	if l.Next != "" {
		_, err := fmt.Fprintf(w, "%s; more may follow: add -after %s\n", n, l.Next)
		return err
	}
	_, err := fmt.Fprintf(w, "%s; end of the listing\n", n)
	return err
}
