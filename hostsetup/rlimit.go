package hostsetup

import (
	"context"
	"syscall"

	"k8s.io/klog/v2"
)

// NoFileLimiter sets the process's open-file limit; a fake in tests, so they
// do not change the test process's own limit.
type NoFileLimiter interface {
	SetNoFile(n uint64) error
}

// ProcessNoFile is the real RLIMIT_NOFILE of this process. syscall.Setrlimit
// (not x/sys) so Go also hands the new limit to the processes it starts.
type ProcessNoFile struct{}

func (ProcessNoFile) SetNoFile(n uint64) error {
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n})
}

// ApplyMaxOpenFiles sets maxOpenFiles as both the soft and hard RLIMIT_NOFILE,
// as upstream at start. As upstream, a failure (no CAP_SYS_RESOURCE, above
// fs.nr_open) is logged and the start goes on.
func ApplyMaxOpenFiles(ctx context.Context, maxOpenFiles int64, l NoFileLimiter) {
	logger := klog.FromContext(ctx)
	if maxOpenFiles <= 0 {
		return // defaulting makes 0 the upstream 1000000; never set a limit of 0
	}
	if err := l.SetNoFile(uint64(maxOpenFiles)); err != nil {
		logger.Error(err, "Failed to set rlimit on max file handles", "maxOpenFiles", maxOpenFiles)
		return
	}
	logger.V(2).Info("Set the open file limit", "maxOpenFiles", maxOpenFiles)
}
