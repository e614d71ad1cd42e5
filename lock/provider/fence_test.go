package provider_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock/provider"
)

func TestCheckFence(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	ctx := context.Background()
	if err := provider.CheckFence(ctx, logger, nil, "secret-key", idemkit.FenceWarn); err != nil || buf.Len() != 0 {
		t.Fatalf("at the warning threshold: %v, log %q", err, buf.String())
	}
	if err := provider.CheckFence(ctx, logger, nil, "secret-key", idemkit.FenceWarn+1); err != nil || buf.Len() == 0 {
		t.Fatalf("above the warning threshold: %v, log %q", err, buf.String())
	}
	if strings.Contains(buf.String(), "secret-key") || !strings.Contains(buf.String(), idemkit.DefaultHasher().Hash("secret-key")) {
		t.Fatalf("the warning must name the key by hash only: %q", buf.String())
	}
	if err := provider.CheckFence(ctx, nil, nil, "k", idemkit.FenceMax); err != nil {
		t.Fatalf("the maximum itself is refused: %v", err)
	}
	err := provider.CheckFence(ctx, nil, nil, "secret-key", idemkit.FenceMax+1)
	if idemkit.CodeOf(err) != idemkit.CodeInternal || strings.Contains(err.Error(), "secret-key") {
		t.Fatalf("past the maximum: %v", err)
	}
}

func TestNextFence(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	ms := idemkit.Fence(now.UnixMilli())
	cases := []struct {
		prev, want idemkit.Fence
	}{
		{0, ms},            // a new key: the clock in milliseconds
		{ms - 10, ms},      // an old fence: the clock again
		{ms - 1, ms},       // the clock is already one more
		{ms, ms + 1},       // the same millisecond: one more
		{ms + 41, ms + 42}, // a fence ahead of the clock: one more
	}
	for _, c := range cases {
		if got := provider.NextFence(c.prev, now); got != c.want {
			t.Fatalf("NextFence(%v) = %v; want %v", c.prev, got, c.want)
		}
		if got := provider.NextFence(c.prev, now); len(got.String()) != idemkit.FenceDigits || got >= idemkit.FenceWarn {
			t.Fatalf("a clock-derived fence %v is not a 15-digit fence below the warning threshold", got)
		}
	}
	if got := provider.NextFence(0, time.Unix(-5, 0)); got != 1 {
		t.Fatalf("NextFence before the epoch = %v; want 1", got)
	}
}

func TestKeepUntil(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := provider.NextFence(0, now)
	// A released lease whose fence is the current millisecond is kept until
	// the clock has passed it.
	if got, want := provider.KeepUntil(f, time.Time{}), now.Add(time.Millisecond); !got.Equal(want) {
		t.Fatalf("KeepUntil(released) = %v; want %v", got, want)
	}
	// A lease is kept until it expires.
	if got, want := provider.KeepUntil(f, now.Add(time.Minute)), now.Add(time.Minute); !got.Equal(want) {
		t.Fatalf("KeepUntil(live) = %v; want %v", got, want)
	}
	// A fence ahead of the clock holds the record past its expiry.
	ahead := f + 60_000
	if got, want := provider.KeepUntil(ahead, now.Add(time.Second)), now.Add(time.Minute+time.Millisecond); !got.Equal(want) {
		t.Fatalf("KeepUntil(ahead) = %v; want %v", got, want)
	}
	// Once the record is gone, the next fence is still greater.
	gone := provider.KeepUntil(ahead, now.Add(time.Second))
	if next := provider.NextFence(0, gone); next <= ahead {
		t.Fatalf("the next fence %v after removal at %v is not above %v", next, gone, ahead)
	}
	// Absurd fences do not overflow.
	if got := provider.KeepUntil(^idemkit.Fence(0), time.Time{}); got.Before(now) {
		t.Fatalf("KeepUntil(max uint64) = %v", got)
	}
}
