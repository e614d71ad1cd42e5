package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
	"github.com/idemkit/idemkit/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		clock := fakeclock.New()
		s := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxResponseBytes(1<<20))
		return &storetest.Env{Store: s, Advance: clock.Advance, Break: func() { _ = s.Close() }, MaxResponseBytes: 1 << 20}
	})
}

func TestConformanceRealClock(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		s := memstore.New(memstore.WithMaxResponseBytes(2 << 20))
		return &storetest.Env{Store: s, Break: func() { _ = s.Close() }, Margin: 30 * time.Millisecond, MaxResponseBytes: 2 << 20}
	})
}

func TestSweepDropsExpiredRecords(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New()
	s := memstore.New(memstore.WithClock(clock.Now))
	for i := range 100 {
		if _, err := s.Put(ctx, store.Record{Key: string(rune(0x4e00 + i)), State: store.StateCompleted}, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Second)
	for i := range 300 {
		if _, err := s.Put(ctx, store.Record{Key: "live" + string(rune(0x4e00+i)), State: store.StateCompleted}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n != 300 {
		t.Fatalf("%d records kept; want the 300 live ones after a sweep", n)
	}
}
