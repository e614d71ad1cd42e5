package middleware

import (
	"context"
	"encoding/json"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
)

// Do is [Guard.Execute] for any Go function (queue consumers, cron jobs):
// input's canonical JSON is the fingerprint ([WithValueFingerprint]; a nil
// input matches any call with the key), and fn's value is stored as JSON,
// so T must round-trip through encoding/json. A value that cannot be
// encoded is recorded not replayable. replayed reports whether the value
// came from the record; with an error, value is T's zero value.
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
			return Result{NotReplayable: true}, nil
		}
		return Result{Value: b}, nil
	}, opts...)
	var zero T
	switch {
	case err != nil:
		// A commit that did not land undid what fn's value describes.
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
