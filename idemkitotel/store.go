package idemkitotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// The backend operations, as idemkit.backend.operation names them.
const (
	opClaim = iota
	opExtend
	opComplete
	opRelease
	opGet
	opDelete
	opCommit
	opRecordStep
	numOps
)

var opNames = [numOps]string{"claim", "extend", "complete", "release", "get", "delete", "commit", "record-step"}

// The results of backend operations, as idemkit.backend.result names them.
const (
	resClaimed = iota // claim: a new claim was made
	resBusy           // claim: a live claim of another call is there
	resDone           // claim: an outcome is there (completed or not replayable)
	resOK             // extend, complete, release, record-step: it took effect; get: a record was found; delete: one was deleted
	resRefused        // extend, complete, release, record-step: the record no longer carries the claim; get, delete: no record
	numResults
)

var resultNames = [numResults]string{"claimed", "busy", "done", "ok", "refused"}

// numCodes is the number of idemkit codes (CodeUnknown included).
const numCodes = int(idemkit.CodeMisconfigured) + 1 // the last code

// backendAttrs holds the measurement options of every backend operation's
// attributes, made once: operation × result, and operation × error code.
type backendAttrs struct {
	results [numOps][numResults]*attrOpts
	errors  [numOps][numCodes]*attrOpts
}

func newBackendAttrs() backendAttrs {
	var b backendAttrs
	for op := range numOps {
		for res := range numResults {
			b.results[op][res] = newAttrOpts(attribute.NewSet(
				keyBackendOp.String(opNames[op]), keyResult.String(resultNames[res])))
		}
		for code := range numCodes {
			b.errors[op][code] = newAttrOpts(attribute.NewSet(
				keyBackendOp.String(opNames[op]), keyResult.String("error"), keyErrorType.String(idemkit.Code(code).String())))
		}
	}
	return b
}

// Store returns s with every operation counted (idemkit.backend.operations)
// and timed (idemkit.backend.duration) by operation and result. It only
// wraps the calls: it adds no round trip, and answers exactly what s
// answers. Give the guard the wrapped store:
//
//	guard, err := middleware.New(hook.Store(backend), middleware.WithHook(hook))
//
// It unwraps to s (a method Unwrap() store.Store), so store.Inspect sees a
// sealed store through it, in whichever order the two are combined.
func (h *Hook) Store(s store.Store) store.Store {
	m := &measuredStore{next: s, h: h}
	w, watches := s.(store.Watcher)
	st, steps := s.(store.Stepper)
	switch {
	case watches && steps:
		return &struct {
			*watchingStore
			stepRecorder
		}{&watchingStore{measuredStore: m, watcher: w}, stepRecorder{m, st}}
	case watches:
		return &watchingStore{measuredStore: m, watcher: w}
	case steps:
		return &struct {
			*measuredStore
			stepRecorder
		}{m, stepRecorder{m, st}}
	}
	return m
}

// stepRecorder is the store.Stepper of the store [Hook.Store] returns for
// a store that records steps: its recordings counted and timed as
// record-step.
type stepRecorder struct {
	m  *measuredStore
	st store.Stepper
}

// RecordStep calls the store's RecordStep, counted as ok or refused.
func (r stepRecorder) RecordStep(ctx context.Context, key string, fence idemkit.Fence, index int, step store.Step, keep time.Duration) (bool, error) {
	start := time.Now()
	ok, err := r.st.RecordStep(ctx, key, fence, index, step, keep)
	r.m.record(ctx, opRecordStep, okResult(ok), err, start)
	return ok, err
}

// watchingStore is the store [Hook.Store] returns for a store that
// notifies: a store.Watcher through it, so waiting duplicates are still
// woken by the backend's notification.
type watchingStore struct {
	*measuredStore
	watcher store.Watcher
}

// Watch implements store.Watcher with the wrapped store's watch.
func (s *watchingStore) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	return s.watcher.Watch(ctx, key)
}

// measuredStore is the store [Hook.Store] returns.
type measuredStore struct {
	next store.Store
	h    *Hook
}

var _ store.Store = (*measuredStore)(nil)

// Unwrap returns the store it measures.
func (s *measuredStore) Unwrap() store.Store { return s.next }

// record counts and times one operation that started at start.
func (s *measuredStore) record(ctx context.Context, op, res int, err error, start time.Time) {
	d := time.Since(start).Seconds()
	var set *attrOpts
	if err != nil {
		code := idemkit.CodeOf(err)
		if int(code) >= numCodes {
			code = idemkit.CodeUnknown
		}
		set = s.h.backend.errors[op][code]
	} else {
		set = s.h.backend.results[op][res]
	}
	s.h.backendOps.Add(ctx, 1, set.add...)
	s.h.backendDuration.Record(ctx, d, set.record...)
}

func okResult(ok bool) int {
	if ok {
		return resOK
	}
	return resRefused
}

// Claim calls the store's Claim, counted as claimed, busy or done.
func (s *measuredStore) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	start := time.Now()
	rec, claimed, err := s.next.Claim(ctx, key, fp, ttl)
	res := resBusy
	switch {
	case claimed:
		res = resClaimed
	case rec.State.Done():
		res = resDone
	}
	s.record(ctx, opClaim, res, err, start)
	return rec, claimed, err
}

// Extend calls the store's Extend, counted as ok or refused.
func (s *measuredStore) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	start := time.Now()
	until, ok, err := s.next.Extend(ctx, key, fence, ttl)
	s.record(ctx, opExtend, okResult(ok), err, start)
	return until, ok, err
}

// Complete calls the store's Complete, counted as ok or refused.
func (s *measuredStore) Complete(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	start := time.Now()
	ok, err := s.next.Complete(ctx, rec, ttl)
	s.record(ctx, opComplete, okResult(ok), err, start)
	return ok, err
}

// Release calls the store's Release, counted as ok or refused.
func (s *measuredStore) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	start := time.Now()
	ok, err := s.next.Release(ctx, key, fence)
	s.record(ctx, opRelease, okResult(ok), err, start)
	return ok, err
}

// Get calls the store's Get, counted as ok (found) or refused (absent).
func (s *measuredStore) Get(ctx context.Context, key string) (store.Record, bool, error) {
	start := time.Now()
	rec, ok, err := s.next.Get(ctx, key)
	s.record(ctx, opGet, okResult(ok), err, start)
	return rec, ok, err
}

// Work implements store.Transactor: the wrapped store's work, whose
// commit is counted as ok or refused (operation "commit"); a nil Work when
// the wrapped store is no store.Transactor.
func (s *measuredStore) Work(ctx context.Context, key string, fence idemkit.Fence) (context.Context, store.Work) {
	t, ok := s.next.(store.Transactor)
	if !ok {
		return ctx, nil
	}
	ctx, w := t.Work(ctx, key, fence)
	if w == nil {
		return ctx, nil
	}
	return ctx, &measuredWork{Work: w, s: s}
}

// measuredWork is the work of a measured store.
type measuredWork struct {
	store.Work
	s *measuredStore
}

// Commit calls the work's Commit, counted as ok or refused.
func (w *measuredWork) Commit(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	start := time.Now()
	ok, err := w.Work.Commit(ctx, rec, ttl)
	w.s.record(ctx, opCommit, okResult(ok), err, start)
	return ok, err
}

// Delete calls the store's Delete, counted as ok (deleted) or refused
// (absent).
func (s *measuredStore) Delete(ctx context.Context, key string) (bool, error) {
	start := time.Now()
	ok, err := s.next.Delete(ctx, key)
	s.record(ctx, opDelete, okResult(ok), err, start)
	return ok, err
}
