package bench

import (
	"bytes"
	"flag"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

var (
	reportFile = flag.String("report", "", "write the full comparison into this markdown file (between its BEGIN/END markers); empty: a short smoke run")
	duration   = flag.Duration("duration", 3*time.Second, "measured time per scenario in a full run")
)

// TestReport runs every comparison. Without -report it runs each scenario
// for a moment and checks that every library completed cycles without
// errors; with -report it measures for -duration per scenario and writes
// the tables.
func TestReport(t *testing.T) {
	d := 500 * time.Millisecond
	if *reportFile != "" {
		d = *duration
	}
	var results []Result
	results = append(results, redisScenarios(t, d)...)
	results = append(results, postgresScenarios(t, d)...)
	limits := limitScenarios(t, d)
	checkLimits(t, limits)
	https := httpScenarios(t, d)
	checkHTTP(t, https)
	replicas := replicaScenarios(t, d)
	dups := duplicateScenarios(t, d)
	checkDuplicates(t, dups)
	txs := txScenarios(t, d)
	checkTx(t, txs)
	for _, r := range append(results, replicas...) {
		if r.Ops == 0 || r.Errors > 0 {
			t.Errorf("%s / %s / %s / %d workers: %d cycles, %d errors", r.Group, r.Subject, r.Mode, r.Workers, r.Ops, r.Errors)
		}
	}
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, results); err != nil {
		t.Fatal(err)
	}
	if err := WriteLimits(&buf, limits); err != nil {
		t.Fatal(err)
	}
	if err := WriteHTTP(&buf, https); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(&buf, replicas); err != nil {
		t.Fatal(err)
	}
	if err := WriteDuplicates(&buf, dups); err != nil {
		t.Fatal(err)
	}
	if err := WriteTx(&buf, txs); err != nil {
		t.Fatal(err)
	}
	if *reportFile == "" {
		t.Log(buf.String())
		return
	}
	host, _ := os.Hostname()
	header := "Measured " + time.Now().UTC().Format("2006-01-02") + " on " + host + " (" + runtime.GOOS + "/" + runtime.GOARCH +
		", " + itoa(runtime.NumCPU()) + " CPUs, " + runtime.Version() + "), " + duration.String() + " per scenario, servers on loopback started by internal/testenv.\n"
	if err := replaceBetweenMarkers(*reportFile, header+buf.String()); err != nil {
		t.Fatal(err)
	}
}

const (
	beginMarker = "<!-- BEGIN RESULTS -->"
	endMarker   = "<!-- END RESULTS -->"
)

// replaceBetweenMarkers puts text between the report markers of file.
func replaceBetweenMarkers(file, text string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	if i < 0 || j < i {
		s += "\n" + beginMarker + "\n" + endMarker + "\n"
		i, j = strings.Index(s, beginMarker), strings.Index(s, endMarker)
	}
	s = s[:i+len(beginMarker)] + "\n" + text + "\n" + s[j:]
	return os.WriteFile(file, []byte(s), 0o644)
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
