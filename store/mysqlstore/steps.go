package mysqlstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

var _ store.Stepper = (*Store)(nil)

// RecordStep implements [store.Stepper]: one UPDATE guarded by the fence,
// the claimed state and the step count, which appends the step to the
// row's steps column and reports the new count through
// LAST_INSERT_ID(expr); after a lost connection, a step found recorded at
// index exactly as given says that the try before landed.
func (s *Store) RecordStep(ctx context.Context, key string, fence idemkit.Fence, index int, step store.Step, keep time.Duration) (bool, error) {
	const op = "record-step"
	if err := engine.Ready(ctx, op, engine.ValidateStep(key, fence, index, step, keep), checkFence(op, fence)); err != nil {
		return false, err
	}
	enc := encodeStep(step)
	query := func(try int) string { return s.q.recordStepSQL(key, fence, index, enc, keep, try > 0) }
	var (
		n   int64
		err error
	)
	if s.renewer.active() {
		// Works hold transactions, and may hold every connection of the
		// pool: record on the connection kept for their renewals.
		n, err = s.renewer.exec(ctx, op, query)
	} else {
		err = retry(ctx, op, s.inTx, func(ctx context.Context, try int) (bool, error) {
			var err error
			n, err = lastID(s.db.ExecContext(ctx, query(try)))
			return true, err
		})
	}
	if err != nil {
		return false, s.starvedPool(ctx, err)
	}
	return n != 0, nil
}

// stepTrailer is the bytes that end a step in the steps column: its
// name's length (one byte) and its result's length (four, big-endian).
const stepTrailer = 5

// encodeStep returns step as the steps column holds it: its name, its
// result, then its trailer, so that a row's steps are read from the end
// and a step is recognised whole at the end of them.
func encodeStep(step store.Step) []byte {
	b := make([]byte, 0, len(step.Name)+len(step.Result)+stepTrailer)
	b = append(b, step.Name...)
	b = append(b, step.Result...)
	b = append(b, byte(len(step.Name)))
	return binary.BigEndian.AppendUint32(b, uint32(len(step.Result)))
}

// decodeSteps returns the steps a steps column holds, in order, each
// result capped at its own length (an append to one never writes over the
// next). They share b, which the caller owns.
func decodeSteps(op string, b []byte) ([]store.Step, error) {
	var rev []store.Step
	for end := len(b); end > 0; {
		if end < stepTrailer || len(rev) == store.MaxSteps {
			return nil, corruptSteps(op, len(b))
		}
		nameLen := int(b[end-stepTrailer])
		resLen := int(binary.BigEndian.Uint32(b[end-4 : end]))
		resEnd := end - stepTrailer
		if nameLen == 0 || resLen > resEnd-nameLen {
			return nil, corruptSteps(op, len(b))
		}
		resStart := resEnd - resLen
		rev = append(rev, store.Step{Name: string(b[resStart-nameLen : resStart]), Result: b[resStart:resEnd:resEnd]})
		end = resStart - nameLen
	}
	steps := make([]store.Step, len(rev))
	for i, st := range rev {
		steps[len(rev)-1-i] = st
	}
	return steps, nil
}

func corruptSteps(op string, n int) error {
	return idemkit.NewError(idemkit.CodeInternal, op, fmt.Sprintf("the stored record's %d bytes of steps are not steps this store wrote", n), nil)
}
