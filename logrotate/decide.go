// Package logrotate rotates the log files of running containers as the
// kubelet's container log manager does (containerLogMaxSize,
// containerLogMaxFiles, containerLogMaxWorkers, containerLogMonitorInterval):
// every monitor interval, a live log at or above the size limit is renamed to
// "<log>.<timestamp>" and the runtime is asked to reopen it (CRI
// ReopenContainerLog); older rotated files are gzipped and the oldest removed
// so that at most maxFiles files remain, the live one included.
//
// containerLogMaxWorkers workers check each running container's log (the CRI
// logPath, resolved below podLogsDir). Decide also removes .tmp leftovers; if
// ReopenContainerLog fails, the live file is renamed back. RemoveLogs removes
// a container's logs for container GC.
//
// Decide is the pure decision for one container's log; Manager is the
// executor (CRI calls, the files, the workers and the monitor loop).
package logrotate

import (
	"slices"
	"strings"
	"time"
)

// Upstream's names, kept so that the files of either agent are recognised by the other.
const (
	// TimestampFormat is the suffix of a rotated log: "0.log.20060102-150405".
	TimestampFormat = "20060102-150405"
	// compressSuffix ends a rotated log once it is gzipped.
	compressSuffix = ".gz"
	// tmpSuffix ends a compression in progress; one left behind was interrupted.
	tmpSuffix = ".tmp"
)

// Policy is the rotation policy of every container of the node.
type Policy struct {
	// MaxSize in bytes: a live log this large or larger is rotated. Negative:
	// no rotation (upstream's meaning of a negative containerLogMaxSize).
	MaxSize int64
	// MaxFiles is how many files one container log may have, the live one
	// included (at least 2).
	MaxFiles int
}

// Logs is what is on disk of one container's log.
type Logs struct {
	// Live is the base name of the file the runtime writes ("0.log").
	Live string
	// Size of the live file in bytes.
	Size int64
	// Rotated holds the names of the other regular files of the directory
	// named "<Live>.*", in any order: rotated logs, gzipped ones, and
	// leftovers of interrupted compressions.
	Rotated []string
}

// Plan is what to do with one container's log, in this order: remove,
// compress, rotate. The zero Plan does nothing.
type Plan struct {
	// Remove lists leftovers of interrupted compressions (".tmp" files, and
	// rotated files whose ".gz" was already written), then the oldest rotated
	// files beyond the limit.
	Remove []string
	// Compress lists the rotated files to gzip into "<name>.gz".
	Compress []string
	// RotateTo is the name the live file is renamed to before the runtime
	// reopens it; "" when the live file stays.
	RotateTo string
}

// Decide returns what to do with a container's log at time now. Nothing is
// done while the live file is below MaxSize, as upstream, which also leaves
// leftovers alone until then. Once it is not, the live file is renamed to
// "<Live>.<now>", which stays uncompressed so that readers still on it can
// finish; every older rotated file is compressed, and the oldest are removed
// so that MaxFiles-2 remain (with the renamed and the new live file: MaxFiles).
func Decide(l Logs, p Policy, now time.Time) Plan {
	if p.MaxSize < 0 || l.Size < p.MaxSize {
		return Plan{}
	}
	names := slices.Sorted(slices.Values(l.Rotated)) // timestamps sort as times
	present := make(map[string]bool, len(names))
	for _, n := range names {
		present[n] = true
	}
	target := l.Live + "." + now.Format(TimestampFormat)
	if present[target] || present[target+compressSuffix] {
		// Rotated already within this second (a clock set back): renaming now
		// would overwrite that file, or leave one that a later round takes for
		// a compression leftover. The next round has another name.
		return Plan{}
	}
	var plan Plan
	var inUse []string
	for _, n := range names {
		if strings.HasSuffix(n, tmpSuffix) || (!strings.HasSuffix(n, compressSuffix) && present[n+compressSuffix]) {
			plan.Remove = append(plan.Remove, n)
			continue
		}
		inUse = append(inUse, n)
	}
	// The live file is renamed and the runtime starts a new one: besides
	// those two, MaxFiles-2 rotated files may stay. Oldest go first, so a
	// reader following the newest ones is not cut short.
	if keep := max(p.MaxFiles-2, 0); len(inUse) > keep {
		plan.Remove = append(plan.Remove, inUse[:len(inUse)-keep]...)
		inUse = inUse[len(inUse)-keep:]
	}
	for _, n := range inUse {
		if !strings.HasSuffix(n, compressSuffix) {
			plan.Compress = append(plan.Compress, n)
		}
	}
	plan.RotateTo = target
	return plan
}
