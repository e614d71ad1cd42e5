package cli

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/idemkit/idemkit/idemkitotel"
)

// Metrics is a demo's telemetry with -metrics: the idemkitotel hook,
// measuring on a meter provider whose reader is the Prometheus exporter,
// and the handler that serves what it exports, for GET /metrics.
type Metrics struct {
	// Hook observes the guard and its backend.
	Hook *idemkitotel.Hook
	// Handler serves the metrics in the Prometheus text format.
	Handler http.Handler

	provider *sdkmetric.MeterProvider
}

// NewMetrics builds the telemetry of one program, whose service.name
// (target_info's service_name) is service. Its registry is its own, not
// Prometheus's global one, so that several programs can run in one process
// (as the tests run them).
func NewMetrics(service string) (*Metrics, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter),
		sdkmetric.WithResource(resource.NewSchemaless(attribute.String("service.name", service))))
	hook, err := idemkitotel.New(idemkitotel.WithMeterProvider(provider))
	if err != nil {
		_ = provider.Shutdown(context.Background())
		return nil, err
	}
	return &Metrics{
		Hook:     hook,
		Handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		provider: provider,
	}, nil
}

// Shutdown stops the meter provider.
func (m *Metrics) Shutdown(ctx context.Context) error { return m.provider.Shutdown(ctx) }
