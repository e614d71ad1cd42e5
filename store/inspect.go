package store

import "context"

// Inspection is what an operator sees of one record (see [Inspect]).
type Inspection struct {
	Record      // its Response only when asked for, opened when the store seals
	Size   int  // the bytes the response takes in the backend (sealed: its envelope)
	Sealed bool // whether the response is sealed
}

// Inspect reads the live record under key as an operator would see it,
// without changing it: its state, fingerprint, fence, times, the size of
// its response and whether that response is sealed. The response itself
// is returned only with withResponse: opened when s seals with a key that
// can open it (else the error matches [ErrUnsealable]), left out when it
// is sealed and s cannot open it (a store without the seal keys). ok is
// false when there is no live record.
//
// A decorator with an Unwrap() Store method is seen through, so that a
// sealed store under it is still inspected as sealed.
func Inspect(ctx context.Context, s Store, key string, withResponse bool) (in Inspection, ok bool, err error) {
	inner := s
	sl, sealing := sealedUnder(s)
	if sealing {
		inner = sl.next
	}
	rec, ok, err := inner.Get(ctx, key)
	if err != nil || !ok {
		return Inspection{}, ok, err
	}
	in = inspection(rec)
	switch {
	case !withResponse:
	case sealing && (len(rec.Response) > 0 || rec.State.Done()):
		opened, err := sl.open("inspect", key, rec)
		if err != nil {
			return Inspection{}, false, err
		}
		in.Response = opened.Response
	case !in.Sealed:
		in.Response = rec.Response
	}
	return in, true, nil
}

// isSealed reports whether a stored response is a sealed envelope (of any
// version).
func isSealed(response []byte) bool {
	n := len(sealMagic) - 1
	return len(response) >= n+1 && string(response[:n]) == sealMagic[:n]
}

// sealedUnder returns the sealing store s is or wraps (through Unwrap()
// Store methods), if any.
func sealedUnder(s Store) (*sealed, bool) {
	return under(s, func(s Store) (*sealed, bool) {
		if t, ok := s.(sealer); ok {
			return t.sealedStore(), true
		}
		return nil, false
	})
}

// under returns what match finds in s or in a store s wraps: through a
// sealing store's next, or an Unwrap() Store method.
func under[T any](s Store, match func(Store) (T, bool)) (T, bool) {
	for range 16 { // a bound, against a wrapper that unwraps to itself
		if v, ok := match(s); ok {
			return v, true
		}
		switch t := s.(type) {
		case sealer:
			s = t.sealedStore().next
		case interface{ Unwrap() Store }:
			s = t.Unwrap()
		default:
			var zero T
			return zero, false
		}
	}
	var zero T
	return zero, false
}

// inspection is rec as an operator sees it: the size of its response and
// whether it is sealed, without the response (nor a replaced one).
func inspection(rec Record) Inspection {
	in := Inspection{Record: rec, Size: len(rec.Response), Sealed: isSealed(rec.Response)}
	in.Response, in.Replaced = nil, nil
	return in
}
