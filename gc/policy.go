// Package gc garbage-collects unused images and dead containers and sandboxes.
// The selection rules are pure functions (SelectImagesToFree,
// SelectImagesUnusedFor, SelectContainersToRemove, SelectSandboxesToRemove,
// BytesToFree); ImageManager and ContainerGC are thin runners over injected
// CRI interfaces. Container GC runs every minute and image GC every 5 minutes,
// both also on demand under disk pressure (eviction). Image GC keeps its
// history in <root>/image_gc_state.json.
package gc

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// ImageRecord is what image GC knows about one image.
type ImageRecord struct {
	ID            string
	Size          int64
	FirstDetected time.Time
	LastUsed      time.Time // zero: never seen in use
	Pinned        bool
	InUse         bool
}

// ValidateThresholds checks imageGCHigh/LowThresholdPercent as upstream does.
func ValidateThresholds(highPct, lowPct int) error {
	if highPct < 0 || highPct > 100 {
		return fmt.Errorf("imageGCHighThresholdPercent %d must be within 0-100", highPct)
	}
	if lowPct < 0 || lowPct > 100 {
		return fmt.Errorf("imageGCLowThresholdPercent %d must be within 0-100", lowPct)
	}
	if lowPct >= highPct {
		return fmt.Errorf("imageGCLowThresholdPercent %d must be less than imageGCHighThresholdPercent %d", lowPct, highPct)
	}
	return nil
}

// BytesToFree returns how much image GC must free: 0 while usage is below
// highPct, otherwise enough to bring usage down to lowPct.
func BytesToFree(capacity, available int64, highPct, lowPct int) int64 {
	if capacity <= 0 {
		return 0
	}
	available = min(max(available, 0), capacity)
	usagePct := 100 - int(available*100/capacity)
	if usagePct < highPct {
		return 0
	}
	return max(capacity*int64(100-lowPct)/100-available, 0)
}

// evictionOrder sorts removable images least recently used first, ties by
// first detection.
func evictionOrder(records []ImageRecord) []ImageRecord {
	out := slices.Clone(records)
	slices.SortStableFunc(out, func(a, b ImageRecord) int {
		if r := a.LastUsed.Compare(b.LastUsed); r != 0 {
			return r
		}
		if r := a.FirstDetected.Compare(b.FirstDetected); r != 0 {
			return r
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}

// SelectImagesToFree picks images to remove, least recently used first,
// until bytesToFree is reached. It never picks an image that is in use,
// pinned, or detected less than minAge ago. freed may be less than
// bytesToFree when not enough is eligible.
func SelectImagesToFree(records []ImageRecord, now time.Time, minAge time.Duration, bytesToFree int64) (victims []ImageRecord, freed int64) {
	if bytesToFree <= 0 {
		return nil, 0
	}
	for _, r := range evictionOrder(records) {
		if r.InUse || r.Pinned || now.Sub(r.FirstDetected) < minAge {
			continue
		}
		victims = append(victims, r)
		freed += r.Size
		if freed >= bytesToFree {
			break
		}
	}
	return victims, freed
}

// SelectImagesUnusedFor picks unused, unpinned images not used for longer
// than maxAge (imageMaximumGCAge). "Unused for" counts from the last use or,
// for an image never seen in use, from its first detection: so a freshly
// restarted nodelet without its state file does not remove everything.
func SelectImagesUnusedFor(records []ImageRecord, now time.Time, maxAge time.Duration) []ImageRecord {
	if maxAge <= 0 {
		return nil
	}
	var out []ImageRecord
	for _, r := range evictionOrder(records) {
		if r.InUse || r.Pinned {
			continue
		}
		since := r.LastUsed
		if since.Before(r.FirstDetected) {
			since = r.FirstDetected
		}
		if now.Sub(since) > maxAge {
			out = append(out, r)
		}
	}
	return out
}
