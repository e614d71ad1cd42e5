package demotest

import (
	"io"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/idemkit/idemkit/internal/testenv"
)

// RunMemory starts run on the memory backend with args and -addr
// 127.0.0.1:0, calls check with the address it listens on, then stops it
// and fails the test unless it shut down gracefully within 15 seconds.
func RunMemory(t *testing.T, run RunFunc, args []string, check func(t *testing.T, addr string)) {
	serve(t, run, args, check)
}

// Metrics is one scrape of a demo's GET /metrics, by metric family name
// (the Prometheus names: idemkit_call_duration_seconds,
// idemkit_backend_operations_total, ...).
type Metrics map[string]*dto.MetricFamily

// Scrape gets http://addr/metrics, as Prometheus does, and parses the
// text format. It fails t unless the answer is a 200 in that format.
func Scrape(t *testing.T, addr string) Metrics {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %d %s: %.200s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	return Metrics(families)
}

// Count sums, over the series of the family name whose labels include
// labels (name, value, name, value, ...), the sample count of a histogram
// or the value of a counter.
func (m Metrics) Count(name string, labels ...string) float64 {
	f := m[name]
	if f == nil {
		return 0
	}
	var n float64
	for _, s := range f.GetMetric() {
		if !hasLabels(s, labels) {
			continue
		}
		switch {
		case s.GetHistogram() != nil:
			n += float64(s.GetHistogram().GetSampleCount())
		case s.GetCounter() != nil:
			n += s.GetCounter().GetValue()
		}
	}
	return n
}

func hasLabels(s *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range s.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// HTTPMetrics drives an HTTP demo started with -metrics: a first execution
// of POST /orders and its retry (replayed), then a scrape of GET /metrics,
// which must count one call executed and one replayed (with the label
// idemkit_operation="POST /orders" when operation says so, any operation
// when it is ""), and the backend operations they cost: a claim that
// claimed and a complete for the execution, a claim that found the
// outcome for the replay; and the startup check's claim that claimed
// and its release.
func HTTPMetrics(t *testing.T, addr, operation string) {
	key := testenv.Name(t)
	post := func() *http.Response {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/orders", strings.NewReader(`{"x":1}`))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := post(); resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("POST /orders: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := post(); resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry: %d %v; want a replay", resp.StatusCode, resp.Header)
	}
	m := Scrape(t, addr)
	var op []string
	if operation != "" {
		op = []string{"idemkit_operation", operation}
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"idemkit_call_duration_seconds", append([]string{"idemkit_outcome", "executed"}, op...), 1},
		{"idemkit_call_duration_seconds", append([]string{"idemkit_outcome", "replayed"}, op...), 1},
		{"idemkit_execution_duration_seconds", append([]string{"idemkit_outcome", "executed"}, op...), 1},
		{"idemkit_record_size_bytes", append([]string{"idemkit_outcome", "replayed"}, op...), 1},
		{"idemkit_backend_operations_total", []string{"idemkit_backend_operation", "claim", "idemkit_backend_result", "claimed"}, 2},
		{"idemkit_backend_operations_total", []string{"idemkit_backend_operation", "release"}, 1},
		{"idemkit_backend_operations_total", []string{"idemkit_backend_operation", "complete", "idemkit_backend_result", "ok"}, 1},
		{"idemkit_backend_operations_total", []string{"idemkit_backend_operation", "claim", "idemkit_backend_result", "done"}, 1},
	} {
		if n := m.Count(c.name, c.labels...); n != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, n, c.want)
		}
	}
	if n := m.Count("idemkit_call_duration_seconds"); n != 2 {
		t.Errorf("idemkit_call_duration_seconds counts %v calls in all, want 2", n)
	}
}
