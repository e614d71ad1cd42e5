package lock

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

func TestDoOptionValidation(t *testing.T) {
	bad := []Option{
		WithTTL(0), WithTTL(time.Microsecond), WithTimeout(-1), WithReleaseTimeout(0),
		WithBackoff(idemkit.Backoff{}), WithBackoff(idemkit.Backoff{Base: time.Second, Max: time.Millisecond}),
		WithBackoff(idemkit.Backoff{Base: -1, Max: time.Second}),
		func(c *config) { c.ttl, c.renewEvery = time.Second, time.Second },
	}
	for i, o := range bad {
		cfg, err := newConfig([]Option{o})
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.validate(); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("option %d: validate = %v; want InvalidArgument", i, err)
		}
	}
	cfg, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.validate(); err != nil || cfg.renewEvery != 10*time.Second {
		t.Fatalf("defaults: %v, renew every %v; want every 10s (TTL/3)", err, cfg.renewEvery)
	}
	want := idemkit.Backoff{Base: 100 * time.Millisecond, Max: 2 * time.Second}
	if cfg.backoff != want || cfg.ttl != 30*time.Second || cfg.timeout != 5*time.Second || cfg.releaseTimeout != 5*time.Second {
		t.Fatalf("defaults differ from the documented ones: %+v", cfg)
	}
}

func TestNilOptionsAreRefused(t *testing.T) {
	if _, err := newConfig([]Option{nil}); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("a nil option: %v; want InvalidArgument", err)
	}
	if _, err := newConfig([]Option{WithHasher(nil)}); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("a nil hasher: %v; want InvalidArgument", err)
	}
}
