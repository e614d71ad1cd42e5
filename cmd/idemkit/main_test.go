package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/internal/testenv"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quietRedis{}) // as main does
	testenv.Main(m)
}

// result is what one run of the tool gave.
type result struct {
	code           int
	stdout, stderr string
}

// tool runs the tool's run with args, as the command line would.
func tool(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(t.Context(), args, &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

// jsonObject runs the tool with args (and -json) and returns the object it
// printed; it fails t unless the tool exits 0 with one JSON object.
func jsonObject(t *testing.T, args ...string) map[string]any {
	t.Helper()
	r := tool(t, append(args, "-json")...)
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); r.code != exitOK || err != nil || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("idemkit %s: exit %d, stdout %q, stderr %q (%v); want 0 and one JSON object", strings.Join(args, " "), r.code, r.stdout, r.stderr, err)
	}
	return m
}
