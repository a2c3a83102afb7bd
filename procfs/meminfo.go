// Package procfs reads the kernel's /proc and /sys files that more than one part of nodelet needs.
//
// Other /proc files are read with github.com/prometheus/procfs (stats reads
// /proc/stat with it). meminfo stays here (issue 34, measured on v0.22.0): that
// library's Meminfo panics on a blank or one-field line and refuses the whole
// file for one line that does not parse, while node registration (MemTotal,
// SwapTotal) and the eviction manager need the fields that do; ParseMeminfo
// skips the rest, as the kernel adds fields over time.
package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ParseMeminfo turns /proc/meminfo content into bytes by key ("MemTotal",
// "SwapTotal", ...). Values in kB are scaled; lines that do not parse are skipped,
// since the kernel adds fields over time.
func ParseMeminfo(data []byte) map[string]uint64 {
	out := map[string]uint64{}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && f[1] == "kB" {
			n *= 1024
		}
		out[strings.TrimSpace(k)] = n
	}
	return out
}

// ReadMeminfo reads and parses the meminfo file at path (normally /proc/meminfo).
// A file without MemTotal is an error: every consumer needs it.
func ReadMeminfo(path string) (map[string]uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading memory info: %w", err)
	}
	mi := ParseMeminfo(data)
	if _, ok := mi["MemTotal"]; !ok {
		return nil, fmt.Errorf("reading memory info: no MemTotal in %s", path)
	}
	return mi, nil
}
