package testenv

import (
	"os"
	"strconv"
	"strings"
)

// RSS returns the process's resident set size in bytes, or 0 where
// /proc/self/statm cannot be read. Memory-bound tests log it next to the
// heap figures they assert on.
func RSS() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}
