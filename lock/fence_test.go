package lock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

func TestFenceForms(t *testing.T) {
	cases := []struct {
		f lock.Fence
		s string
	}{
		{0, "000000000000000"}, {1, "000000000000001"}, {42, "000000000000042"},
		{lock.FenceWarn, "090000000000000"}, {lock.FenceMax, "900000000000000"}, {999_999_999_999_999, "999999999999999"},
	}
	for _, c := range cases {
		if c.f.String() != c.s {
			t.Fatalf("%d.String() = %q; want %q", c.f, c.f.String(), c.s)
		}
		p, err := lock.ParseFence(c.s)
		if err != nil || p != c.f || p.Uint64() != uint64(c.f) {
			t.Fatalf("ParseFence(%q) = %v, %v", c.s, p, err)
		}
	}
	for _, bad := range []string{"", "1", "00000000000001", "0000000000000001", "-00000000000001", "00000000000000a", "+00000000000001"} {
		if _, err := lock.ParseFence(bad); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("ParseFence(%q) = %v", bad, err)
		}
	}
	// String order is numeric order.
	for a := lock.Fence(0); a < 1200; a += 7 {
		for _, b := range []lock.Fence{a + 1, a * 10, a + 999, lock.FenceMax} {
			if (a < b) != (a.String() < b.String()) || a.Compare(b) != strings.Compare(a.String(), b.String()) {
				t.Fatalf("order of %v and %v differs between numbers and strings", a, b)
			}
		}
	}
	if lock.Fence(3).Compare(3) != 0 || lock.Fence(4).Compare(3) != 1 || lock.Fence(2).Compare(3) != -1 {
		t.Fatal("Compare")
	}
	js, err := json.Marshal(struct{ F lock.Fence }{7})
	if err != nil || string(js) != `{"F":"000000000000007"}` {
		t.Fatalf("JSON %s, %v", js, err)
	}
	var back struct{ F lock.Fence }
	if err := json.Unmarshal(js, &back); err != nil || back.F != 7 {
		t.Fatalf("JSON round trip %v, %v", back.F, err)
	}
	if err := json.Unmarshal([]byte(`{"F":"7"}`), &back); err == nil {
		t.Fatal("a short fence string was accepted")
	}
}

func TestCheckFence(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	ctx := context.Background()
	if err := lock.CheckFence(ctx, logger, nil, "secret-key", lock.FenceWarn); err != nil || buf.Len() != 0 {
		t.Fatalf("at the warning threshold: %v, log %q", err, buf.String())
	}
	if err := lock.CheckFence(ctx, logger, nil, "secret-key", lock.FenceWarn+1); err != nil || buf.Len() == 0 {
		t.Fatalf("above the warning threshold: %v, log %q", err, buf.String())
	}
	if strings.Contains(buf.String(), "secret-key") || !strings.Contains(buf.String(), lock.DefaultHasher().Hash("secret-key")) {
		t.Fatalf("the warning must name the key by hash only: %q", buf.String())
	}
	if err := lock.CheckFence(ctx, nil, nil, "k", lock.FenceMax); err != nil {
		t.Fatalf("the maximum itself is refused: %v", err)
	}
	err := lock.CheckFence(ctx, nil, nil, "secret-key", lock.FenceMax+1)
	if idemkit.CodeOf(err) != idemkit.CodeInternal || strings.Contains(err.Error(), "secret-key") {
		t.Fatalf("past the maximum: %v", err)
	}
}

func TestNextFence(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	ms := lock.Fence(now.UnixMilli())
	cases := []struct {
		prev, want lock.Fence
	}{
		{0, ms},            // a new key: the clock in milliseconds
		{ms - 10, ms},      // an old fence: the clock again
		{ms - 1, ms},       // the clock is already one more
		{ms, ms + 1},       // the same millisecond: one more
		{ms + 41, ms + 42}, // a fence ahead of the clock: one more
	}
	for _, c := range cases {
		if got := lock.NextFence(c.prev, now); got != c.want {
			t.Fatalf("NextFence(%v) = %v; want %v", c.prev, got, c.want)
		}
		if got := lock.NextFence(c.prev, now); len(got.String()) != lock.FenceDigits || got >= lock.FenceWarn {
			t.Fatalf("a clock-derived fence %v is not a 15-digit fence below the warning threshold", got)
		}
	}
	if got := lock.NextFence(0, time.Unix(-5, 0)); got != 1 {
		t.Fatalf("NextFence before the epoch = %v; want 1", got)
	}
}

func TestKeepUntil(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := lock.NextFence(0, now)
	// A released lease whose fence is the current millisecond is kept until
	// the clock has passed it.
	if got, want := lock.KeepUntil(f, time.Time{}), now.Add(time.Millisecond); !got.Equal(want) {
		t.Fatalf("KeepUntil(released) = %v; want %v", got, want)
	}
	// A lease is kept until it expires.
	if got, want := lock.KeepUntil(f, now.Add(time.Minute)), now.Add(time.Minute); !got.Equal(want) {
		t.Fatalf("KeepUntil(live) = %v; want %v", got, want)
	}
	// A fence ahead of the clock holds the record past its expiry.
	ahead := f + 60_000
	if got, want := lock.KeepUntil(ahead, now.Add(time.Second)), now.Add(time.Minute+time.Millisecond); !got.Equal(want) {
		t.Fatalf("KeepUntil(ahead) = %v; want %v", got, want)
	}
	// Once the record is gone, the next fence is still greater.
	gone := lock.KeepUntil(ahead, now.Add(time.Second))
	if next := lock.NextFence(0, gone); next <= ahead {
		t.Fatalf("the next fence %v after removal at %v is not above %v", next, gone, ahead)
	}
	// Absurd fences do not overflow.
	if got := lock.KeepUntil(^lock.Fence(0), time.Time{}); got.Before(now) {
		t.Fatalf("KeepUntil(max uint64) = %v", got)
	}
}
