package idemkitotel_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit/idemkit/idemkitotel"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

// BenchmarkReplay measures a replay from memory without any hook, with a
// hook that does nothing (what the guard spends on events: hashing the
// key), with this hook on the default (no-op) providers, and with it on
// SDK providers (every span sampled, metrics aggregated).
func BenchmarkReplay(b *testing.B) {
	for _, mode := range []string{"off", "hookfunc", "noop", "sdk"} {
		b.Run(mode, func(b *testing.B) {
			s := memstore.New()
			defer s.Close()
			var opts []middleware.Option
			var g *middleware.Guard
			var err error
			switch mode {
			case "off":
				g, err = middleware.New(s)
			case "hookfunc":
				g, err = middleware.New(s, middleware.WithHook(middleware.HookFunc(func(context.Context, middleware.Event) {})))
			default:
				var hopts []idemkitotel.Option
				if mode == "sdk" {
					tp := sdktrace.NewTracerProvider()
					mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
					defer tp.Shutdown(context.Background())
					defer mp.Shutdown(context.Background())
					hopts = append(hopts, idemkitotel.WithTracerProvider(tp), idemkitotel.WithMeterProvider(mp))
				}
				hook, herr := idemkitotel.New(hopts...)
				if herr != nil {
					b.Fatal(herr)
				}
				opts = append(opts, middleware.WithHook(hook))
				g, err = middleware.New(hook.Store(s), opts...)
			}
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			fn := func(context.Context) (int, error) { return 1, nil }
			if _, _, err := middleware.Do(ctx, g, "k", 1, fn, middleware.Operation("op")); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := middleware.Do(ctx, g, "k", 1, fn, middleware.Operation("op")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
