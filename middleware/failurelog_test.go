package middleware

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/fakeclock"
)

// logLines decodes the JSON lines a slog.JSONHandler wrote to buf.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

// TestFailureLogFirstAtOnceThenOncePerInterval: the first failure of a
// cause is logged at once, the next ones within the interval are only
// counted, and the first one after the interval is logged with that
// count; another cause is logged at once whatever the first one's state;
// a caller's ended ctx is not the backend's failure and is not logged.
func TestFailureLogFirstAtOnceThenOncePerInterval(t *testing.T) {
	var buf bytes.Buffer
	clock := fakeclock.New()
	f := failureLog{logger: slog.New(slog.NewJSONHandler(&buf, nil)), every: time.Minute, now: clock.Now}
	ctx := context.Background()
	down := idemkit.NewError(idemkit.CodeServiceUnavailable, "claim", "the connection to Redis failed", errors.New("dial tcp: connection refused"))
	missing := idemkit.NewError(idemkit.CodeMisconfigured, "claim", "the record table is missing: run pgstore.SetupSchema", nil)

	for range 100 {
		f.report(ctx, "claim", down)
	}
	f.report(ctx, "claim", idemkit.NewError(idemkit.CodeAborted, "claim", "context canceled", context.Canceled))
	lines := logLines(t, &buf)
	if len(lines) != 1 {
		t.Fatalf("100 failures of one cause within the interval wrote %d lines; want 1: %s", len(lines), buf.String())
	}
	if l := lines[0]; l["level"] != "ERROR" || l["code"] != "ServiceUnavailable" || l["op"] != "claim" ||
		!strings.Contains(l["error"].(string), "the connection to Redis failed") || l["repeated"] != nil {
		t.Fatalf("the first line: %v", l)
	}

	clock.Advance(59 * time.Second)
	f.report(ctx, "extend", down) // still within the interval: counted
	f.report(ctx, "claim", missing)
	lines = logLines(t, &buf)
	if len(lines) != 2 || lines[1]["code"] != "Misconfigured" || !strings.Contains(lines[1]["msg"].(string), "until its setup is fixed") {
		t.Fatalf("another cause within the first one's interval: %d lines; want it logged at once: %s", len(lines), buf.String())
	}

	clock.Advance(time.Second) // the first cause's interval is over
	f.report(ctx, "claim", down)
	lines = logLines(t, &buf)
	if len(lines) != 3 {
		t.Fatalf("the first failure after the interval wrote %d lines in all; want 3: %s", len(lines), buf.String())
	}
	if l := lines[2]; l["code"] != "ServiceUnavailable" || l["repeated"] != float64(100) || l["interval"] == nil {
		t.Fatalf("the line after the interval: %v; want repeated = 100 (99 at first, 1 later), with the interval", l)
	}
	f.report(ctx, "claim", down)
	if n := len(logLines(t, &buf)); n != 3 {
		t.Fatalf("a failure right after the summary wrote a line (%d in all)", n)
	}
}

// TestFailureLogZeroIntervalLogsEvery: with a zero interval every
// failure is logged.
func TestFailureLogZeroIntervalLogsEvery(t *testing.T) {
	var buf bytes.Buffer
	f := failureLog{logger: slog.New(slog.NewJSONHandler(&buf, nil)), now: fakeclock.New().Now}
	for range 3 {
		f.report(context.Background(), "claim", idemkit.NewError(idemkit.CodeNetworkTimeout, "claim", "timed out", nil))
	}
	if n := len(logLines(t, &buf)); n != 3 {
		t.Fatalf("%d lines; want 3", n)
	}
}
