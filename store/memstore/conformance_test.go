package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/store/memstore"
	"github.com/idemkit/idemkit/store/storetest"
)

const maxResponse = 1 << 20

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		clock := fakeclock.New()
		s := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxResponseBytes(maxResponse))
		t.Cleanup(func() { _ = s.Close() })
		return &storetest.Env{
			Store:            s,
			Advance:          clock.Advance,
			Break:            func() { _ = s.Close() },
			MaxResponseBytes: maxResponse,
			Keys:             func(context.Context) ([]string, error) { return memstore.Immortal(s), nil },
		}
	})
}

func TestConformanceRealClock(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		s := memstore.New(memstore.WithMaxResponseBytes(2 * maxResponse))
		t.Cleanup(func() { _ = s.Close() })
		return &storetest.Env{
			Store:            s,
			Break:            func() { _ = s.Close() },
			Margin:           30 * time.Millisecond,
			MaxResponseBytes: 2 * maxResponse,
		}
	})
}

func TestRecordsConformance(t *testing.T) {
	storetest.RunRecords(t, func(t *testing.T) *storetest.RecordsEnv {
		clock := fakeclock.New()
		s := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxResponseBytes(maxResponse))
		return &storetest.RecordsEnv{Records: s, Advance: clock.Advance, Break: func() { _ = s.Close() }, MaxResponseBytes: maxResponse}
	})
}

func TestRecordsConformanceRealClock(t *testing.T) {
	storetest.RunRecords(t, func(t *testing.T) *storetest.RecordsEnv {
		s := memstore.New()
		return &storetest.RecordsEnv{Records: s, Break: func() { _ = s.Close() }, Margin: 30 * time.Millisecond}
	})
}
