package cgroups

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// CheckSwap is the failSwapOn start-up check on the content of /proc/swaps: any
// line beyond the header means swap is on, which is refused unless failSwapOn is
// false. (A missing /proc/swaps means no swap; pass "".)
func CheckSwap(procSwapsContent string, failSwapOn bool) error {
	if !failSwapOn {
		return nil
	}
	lines := strings.Split(strings.TrimSpace(procSwapsContent), "\n")
	if len(lines) > 1 {
		return fmt.Errorf("running with swap on is not supported, please disable swap! or set --fail-swap-on flag to false. /proc/swaps contained: %v", lines)
	}
	return nil
}

// SwapCapacity reads SwapTotal from /proc/meminfo content, in bytes.
func SwapCapacity(meminfo string) (int64, error) { return meminfoBytes(meminfo, "SwapTotal") }

// MemoryCapacity reads MemTotal from /proc/meminfo content, in bytes.
func MemoryCapacity(meminfo string) (int64, error) { return meminfoBytes(meminfo, "MemTotal") }

func meminfoBytes(meminfo, key string) (int64, error) {
	sc := bufio.NewScanner(strings.NewReader(meminfo))
	for sc.Scan() {
		k, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) != key {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, fmt.Errorf("parsing %s in meminfo: no value", key)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing %s in meminfo: %w", key, err)
		}
		if len(f) > 1 {
			if !strings.EqualFold(f[1], "kB") {
				return 0, fmt.Errorf("parsing %s in meminfo: unknown unit %q", key, f[1])
			}
			n *= 1024
		}
		return n, nil
	}
	return 0, fmt.Errorf("parsing meminfo: no %s line", key)
}
