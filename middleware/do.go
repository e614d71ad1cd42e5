package middleware

import (
	"context"
	"encoding/json"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
)

// Do runs fn at most once for key, like [Guard.Execute], for any Go
// function: queue consumers, cron jobs, outbound calls. input is what the
// work is about (a message, a request struct); its canonical JSON is the
// fingerprint (see [WithValueFingerprint]), so the same key with a
// different input is refused with [ErrMismatch]. A nil input fingerprints nothing: any call with the key
// matches.
//
// fn's value is stored as JSON and decoded into a fresh T on replay, so T
// must round-trip through encoding/json. An error from fn (or a panic) is
// not stored: a retry runs fn again. A value that cannot be encoded is
// recorded as executed-not-replayable: fn never runs again under the key,
// and retries get [ErrNotReplayable].
//
// opts are those of [Guard.Execute] ([Scope], [Operation], [RecordTTL],
// [FailOpen], [WaitBudget], [Credentials]). replayed reports whether the
// value came from the record. With an error, value is always T's zero
// value, even when fn returned one: fn's error, a commit of its
// transaction that did not land, a record that cannot be decoded.
func Do[T any](ctx context.Context, g *Guard, key string, input any, fn func(ctx context.Context) (T, error), opts ...CallOption) (value T, replayed bool, err error) {
	var fp fingerprint.Fingerprint
	if input != nil {
		if fp, err = g.cfg.valueFingerprint(input); err != nil {
			err = idemkit.NewError(idemkit.CodeInvalidArgument, "do", "the input cannot be fingerprinted", err)
			g.newCall(ctx, key, opts).end(Event{Kind: EventRejected, Err: err})
			return value, false, err
		}
	}
	out, err := g.Execute(ctx, key, fp, func(ctx context.Context) (Result, error) {
		v, err := fn(ctx)
		if err != nil {
			return Result{}, err
		}
		value = v
		b, err := json.Marshal(v)
		if err != nil {
			return Result{Verdict: RecordNotReplayable}, nil
		}
		return Result{Value: b}, nil
	}, opts...)
	var zero T
	switch {
	case err != nil:
		// fn's value is not returned with an error: a commit that did not
		// land (pgstore.Tx) undid what it describes.
		return zero, false, err
	case !out.Replayed:
		return value, false, nil
	}
	var v T
	if err := json.Unmarshal(out.Value, &v); err != nil {
		return zero, true, &UnavailableError{Op: "decode", Err: err}
	}
	return v, true, nil
}
