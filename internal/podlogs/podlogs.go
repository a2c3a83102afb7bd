// Package podlogs opens the container log files the runtime writes under the
// pods' log directory (podLogsDir, /var/log/pods). Pods that mount /var/log
// (log shippers, through a hostPath) can replace anything below it, so a log
// file is opened only as a regular file reached through no symlink at all.
package podlogs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/internal/safepath"
)

// ErrHardLink is a log file with more than one name: a pod that can write below
// the pods' log directory could have linked a host file (on the same
// filesystem) there, and the runtime only ever writes a file of one name.
var ErrHardLink = errors.New("log file has more than one hard link")

// ErrLayout is a log path that is not <podLogsDir>/<pod dir>/<container>/<file>.
var ErrLayout = errors.New("not a container log path of the form <podLogsDir>/<pod dir>/<container>/<file>")

// Split cuts a container log path, as the runtime reports it, into the pods'
// log directory and the part below it: the pod's log directory, the
// container's directory and the file. The runtime was given the first by
// nodelet (the sandbox's log directory is <podLogsDir>/<namespace>_<pod>_<uid>,
// as the kubelet makes it), so it is trusted; the rest is not.
func Split(path string) (root, rel string, err error) {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return "", "", fmt.Errorf("log path %q: %w", path, ErrLayout)
	}
	file := filepath.Base(path)
	container := filepath.Dir(path)
	pod := filepath.Dir(container)
	root = filepath.Dir(pod)
	if pod == root || container == pod {
		return "", "", fmt.Errorf("log path %q: %w", path, ErrLayout)
	}
	return root, filepath.Join(filepath.Base(pod), filepath.Base(container), file), nil
}

// Open opens the container log file at path for reading: every component below
// the pods' log directory is opened without following links, and the file is
// opened only if it is a regular file (a FIFO would block the reader; a device
// is no log). Errors wrap safepath.ErrSymlink, safepath.ErrNotRegular,
// ErrLayout, ErrHardLink or the system's error (fs.ErrNotExist).
func Open(path string) (*os.File, error) {
	root, rel, err := Split(path)
	if err != nil {
		return nil, err
	}
	f, err := safepath.OpenRegularNoFollow(root, rel)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Nlink > 1 {
		f.Close()
		return nil, fmt.Errorf("open %s: %d links: %w", path, st.Nlink, ErrHardLink)
	}
	return f, nil
}
