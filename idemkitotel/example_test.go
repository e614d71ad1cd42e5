package idemkitotel_test

import (
	"context"
	"fmt"
	"log"
	"sort"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemkit/idemkit/idemkitotel"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

// A guard reporting to OpenTelemetry: the hook on the guard, and its store
// decorator around the backend. Here the meter provider is read by hand;
// a service gives its own providers (or sets the global ones) with an
// exporter.
func Example() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	hook, err := idemkitotel.New(idemkitotel.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}
	backend := memstore.New()
	defer backend.Close()
	guard, err := middleware.New(hook.Store(backend), middleware.WithHook(hook))
	if err != nil {
		log.Fatal(err)
	}

	// A charge, retried twice with the same key: it runs once.
	charge := func(ctx context.Context) (string, error) { return "receipt-1", nil }
	for range 3 {
		if _, _, err := middleware.Do(context.Background(), guard, "order-1", map[string]int{"amount": 100}, charge,
			middleware.Operation("charge")); err != nil {
			log.Fatal(err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, line := range counts(rm, "idemkit.call.duration", "idemkit.backend.operations") {
		fmt.Println(line)
	}
	// Output:
	// idemkit.backend.operations idemkit.backend.operation=claim idemkit.backend.result=claimed: 1
	// idemkit.backend.operations idemkit.backend.operation=claim idemkit.backend.result=done: 2
	// idemkit.backend.operations idemkit.backend.operation=complete idemkit.backend.result=ok: 1
	// idemkit.call.duration idemkit.operation=charge idemkit.outcome=executed: 1
	// idemkit.call.duration idemkit.operation=charge idemkit.outcome=replayed: 2
}

// counts returns "name attributes: count" for every data point of the
// named instruments (histograms by their count, counters by their value),
// sorted.
func counts(rm metricdata.ResourceMetrics, names ...string) []string {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var lines []string
	add := func(name string, attrs attribute.Set, n uint64) {
		var kv []string
		for _, a := range attrs.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.Emit())
		}
		lines = append(lines, fmt.Sprintf("%s %s: %d", name, strings.Join(kv, " "), n))
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if !want[m.Name] {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					add(m.Name, dp.Attributes, dp.Count)
				}
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					add(m.Name, dp.Attributes, uint64(dp.Value))
				}
			}
		}
	}
	sort.Strings(lines)
	return lines
}
