package volumes

import (
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// mountTmpfs mounts a tmpfs on dir; sizeBytes <= 0 leaves the kernel default.
func mountTmpfs(dir string, sizeBytes int64) error {
	var opts string
	if sizeBytes > 0 {
		opts = "size=" + strconv.FormatInt(sizeBytes, 10)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		return fmt.Errorf("mounting tmpfs on %s (options %q): %w", dir, opts, err)
	}
	return nil
}
