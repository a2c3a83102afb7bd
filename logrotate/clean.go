package logrotate

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/internal/safepath"
)

// RemoveLogs removes a container's log and its rotated files, as upstream's
// container log manager does when the container is removed: the file at
// logPath and every "<file>.*" beside it, resolved below podLogsDir (a path
// outside it is refused with ErrNotBelowPodLogsDir and nothing is removed).
func RemoveLogs(podLogsDir, logPath string) error {
	sub, live, err := locate(podLogsDir, logPath)
	if err != nil {
		return err
	}
	dir, err := safepath.Open(podLogsDir, sub)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening the log directory of %s: %w", logPath, err)
	}
	defer dir.Close()
	rotated, err := rotatedNames(dir, live)
	if err != nil {
		return fmt.Errorf("listing the rotated logs of %s: %w", logPath, err)
	}
	var errs []error
	for _, name := range append(rotated, live) {
		if err := remove(dir, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
