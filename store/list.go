package store

import (
	"context"
	"fmt"

	"github.com/idemkit/idemkit"
)

// Lister is the operator access of a store that can enumerate its records
// (every engine of this repository). [List] finds it through [Seal] and
// decorators with an Unwrap() Store method.
type Lister interface {
	// List returns up to limit live records (claims and outcomes, each
	// with its response) whose record key starts with prefix ("" for
	// all), and a cursor that continues the listing: pass it as after
	// ("" for the first page). next is "" once nothing is left; a page
	// may hold fewer than limit records (even none) while next is not "".
	// A record that lives throughout a listing is shown, once unless the
	// store's documentation says otherwise; one created or deleted during
	// it may be missed. The cursor is opaque and belongs to the store and
	// prefix that made it (another one is InvalidArgument, as is a limit
	// outside 1 to [MaxListLimit]). A record whose key the store keeps only
	// as a hash (its documentation says when) is not listed.
	List(ctx context.Context, prefix, after string, limit int) (recs []Record, next string, err error)
}

// MaxListLimit is the most records one [Lister.List] call returns.
const MaxListLimit = 1000

// List lists the live records of s whose record key starts with prefix, as
// [Lister.List] does, as an operator sees them: each with the size of its
// response and whether it is sealed, without the response itself (see
// [Inspect] for one record's). s must be or wrap (through [Seal] or an
// Unwrap() Store method) a [Lister]; else List returns an InvalidArgument
// error.
func List(ctx context.Context, s Store, prefix, after string, limit int) (page []Inspection, next string, err error) {
	l, ok := listerUnder(s)
	if !ok {
		return nil, "", idemkit.NewError(idemkit.CodeInvalidArgument, "list", fmt.Sprintf("the store (%T) cannot list its records: it is not a store.Lister", s), nil)
	}
	recs, next, err := l.List(ctx, prefix, after, limit)
	if err != nil {
		return nil, "", err
	}
	page = make([]Inspection, len(recs))
	for i, rec := range recs {
		page[i] = inspection(rec)
	}
	return page, next, nil
}

// listerUnder returns the Lister s is or wraps, if any.
func listerUnder(s Store) (Lister, bool) {
	return under(s, func(s Store) (Lister, bool) {
		l, ok := s.(Lister)
		return l, ok
	})
}
