// Package atomicfile replaces files so that neither a concurrent reader nor a
// crash ever sees half of one: nodelet's keys, certificates, kubeconfigs and
// checkpoints are read back at the next start, and a torn one must not wedge
// it.
//
// WriteFile writes a temp file in the same dir, fsyncs it, renames it over the
// target, fsyncs the dir, with the exact mode asked. SetAside moves a file
// that does not read back to <name>.corrupt-<unix time> (docs/on-disk.md lists
// the files and what each does when corrupt).
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// WriteFile replaces path with data, mode perm exactly (the umask does not
// apply): it writes a temporary file in the same directory, syncs it, renames
// it over path and syncs the directory, so after a crash path holds either
// its old content or all of data. A symlink at path is replaced, not followed.
// A missing directory is created (0755), as nodelet's cert dir may be.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the directory of %s: %w", path, err)
	}
	// Hidden, so that directory scanners (static pods, drop-ins) pass it over.
	tmp, err := os.CreateTemp(dir, "."+base+tempMarker+"*")
	if err != nil {
		return fmt.Errorf("creating a temporary file for %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	werr := writeAndSync(tmp, data, perm)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("writing %s: %w", path, werr)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	// The rename itself is durable only once the directory is synced.
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("syncing the directory of %s: %w", path, err)
	}
	return nil
}

func writeAndSync(f *os.File, data []byte, perm os.FileMode) error {
	// CreateTemp made the file 0600: set the wanted mode before any data is in it.
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Sync()
}

// tempMarker is in the name of every temporary file WriteFile makes.
const tempMarker = ".tmp-"

// IsTemp reports whether name (a base name) is a temporary file WriteFile made and a
// crash left behind, so a directory's owner can remove it at start.
func IsTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tempMarker)
}

// SyncDir makes a rename or removal in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// corruptMarker is in the name of a file SetAside moved.
const corruptMarker = ".corrupt-"

// SetAside renames a file that does not read back to <path>.corrupt-<unix
// seconds of now>, so its owner can start without it while the bytes stay
// for whoever investigates, and returns the new path.
func SetAside(path string, now time.Time) (string, error) {
	aside := path + corruptMarker + strconv.FormatInt(now.Unix(), 10)
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("setting aside %s: %w", path, err)
	}
	if err := SyncDir(filepath.Dir(path)); err != nil {
		return aside, fmt.Errorf("syncing the directory of %s: %w", path, err)
	}
	return aside, nil
}
