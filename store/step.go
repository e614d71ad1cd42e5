package store

import (
	"context"
	"time"

	"github.com/idemkit/idemkit"
)

// Step is a recovery point of a claim: one step of the claimed work that
// finished, and what it returned. A claim records its steps in order; a
// claim that takes over from one that ended without an outcome (its holder
// crashed, lost its lease or released it) carries them on, so that work
// run again for the same key resumes after the last recorded step instead
// of starting over. See [Stepper].
type Step struct {
	Name   string // the step's name, as the work gave it: 1 to MaxStepNameBytes bytes of UTF-8
	Result []byte // what the step returned, in the caller's encoding (may be empty)
}

// Limits on the steps a claim records, the same on every engine: at most
// MaxSteps steps, each name at most MaxStepNameBytes bytes, and all names
// and results together at most MaxStepBytes.
const (
	MaxSteps         = 32
	MaxStepNameBytes = 128
	MaxStepBytes     = 64 << 10
)

// Size returns the bytes s counts against [MaxStepBytes]: its name and
// result.
func (s Step) Size() int { return len(s.Name) + len(s.Result) }

// Stepper is an optional interface of a [Store] that records steps (the
// guard's [github.com/idemkit/idemkit/middleware.Step]). On an engine that
// implements it:
//
//   - a new claim that takes over a claim that ended without an outcome
//     (its lease ran out, or it was released) carries that claim's steps
//     over when its fingerprint is the same, and returns them in
//     [Record.Steps] in the same round trip; a claim of another
//     fingerprint, or of a key whose record was completed or deleted,
//     starts with none;
//   - Extend keeps the steps; Complete ends them with the claim (an
//     outcome has none); Release keeps them, invisible to Get, for the
//     next claim of the same fingerprint; Delete removes them;
//   - Get returns a live claim's steps in [Record.Steps].
//
// The engine applies the rules of time, fences and expiry of the package
// doc to the record that carries steps as to any other.
type Stepper interface {
	// RecordStep appends step to the claim (key, fence) as its step
	// number index (from 0) in one conditional write, only while the
	// record still carries that claim and exactly index steps: ok = false,
	// and nothing written, otherwise (another claim, an outcome, nothing,
	// or a step already recorded at index). Like Complete, a claim whose
	// lease ran out still records its step as long as nobody claimed the
	// key since. The record, and after a release what is left of it for
	// the next claim, is kept at least keep from now. A step over the
	// limits (an index of MaxSteps or more, a name of 0 or more than
	// MaxStepNameBytes bytes or not UTF-8, a step larger than
	// MaxStepBytes) is refused with InvalidArgument before any I/O; the
	// caller keeps the total within MaxStepBytes.
	RecordStep(ctx context.Context, key string, fence idemkit.Fence, index int, step Step, keep time.Duration) (ok bool, err error)
}
