package cgroups

import (
	"fmt"
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
