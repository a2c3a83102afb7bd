package volumes

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

const (
	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
	// tsDirLayout is the timestamped payload directory prefix; MkdirTemp
	// appends random digits (..2026_12_02_13_00_00.123456789).
	tsDirLayout = "..2006_01_02_15_04_05."
)

// fileProjection is one file of a volume payload.
type fileProjection struct {
	Data   []byte
	Mode   int32
	FsUser *int64 // owner to give the file; nil keeps root
}

// writePayload makes dir hold exactly payload, using the kubelet's atomic
// writer layout so running containers see a consistent view while it
// changes:
//
//	dir/..2026_12_02_13_00_00.123456789/<files>   the data
//	dir/..data -> ..2026_12_02_13_00_00.123456789  swapped with rename(2)
//	dir/<top-level name> -> ..data/<top-level name>
//
// It returns whether anything was written (false when the current data
// already equals payload). extraMode is the permission bits a later
// fsGroup pass adds, so unchanged data is recognised.
func writePayload(dir string, payload map[string]fileProjection, extraMode os.FileMode, now time.Time) (bool, error) {
	for p := range payload {
		if err := validatePayloadPath(p); err != nil {
			return false, err
		}
	}

	oldTS, err := os.Readlink(filepath.Join(dir, dataDirName))
	if err != nil && !os.IsNotExist(err) {
		return false, fmt.Errorf("reading %s link in %s: %w", dataDirName, dir, err)
	}
	if oldTS != "" {
		same, err := dirMatchesPayload(filepath.Join(dir, oldTS), payload, extraMode)
		if err != nil {
			return false, err
		}
		if same {
			// The user-visible links may still be missing if an earlier
			// write was interrupted; they are cheap to ensure.
			return false, ensureUserLinks(dir, payload)
		}
	}

	tsDir, err := os.MkdirTemp(dir, now.UTC().Format(tsDirLayout))
	if err != nil {
		return false, fmt.Errorf("creating payload directory in %s: %w", dir, err)
	}
	if err := os.Chmod(tsDir, 0o755); err != nil {
		return false, fmt.Errorf("setting mode of %s: %w", tsDir, err)
	}
	tsName := filepath.Base(tsDir)
	if err := writeFiles(tsDir, payload); err != nil {
		_ = os.RemoveAll(tsDir)
		return false, err
	}

	tmpLink := filepath.Join(dir, newDataDirName)
	_ = os.Remove(tmpLink) // leftover of an interrupted write
	if err := os.Symlink(tsName, tmpLink); err != nil {
		_ = os.RemoveAll(tsDir)
		return false, fmt.Errorf("creating %s link: %w", newDataDirName, err)
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataDirName)); err != nil {
		_ = os.Remove(tmpLink)
		_ = os.RemoveAll(tsDir)
		return false, fmt.Errorf("swapping %s link: %w", dataDirName, err)
	}

	if err := ensureUserLinks(dir, payload); err != nil {
		return true, err
	}
	if err := removeStale(dir, tsName, payload); err != nil {
		return true, err
	}
	return true, nil
}

func validatePayloadPath(p string) error {
	if p == "" {
		return fmt.Errorf("invalid payload path: empty")
	}
	if filepath.IsAbs(p) {
		return fmt.Errorf("invalid payload path %q: must be relative", p)
	}
	if strings.HasPrefix(p, "..") {
		return fmt.Errorf("invalid payload path %q: must not start with '..'", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return fmt.Errorf("invalid payload path %q: must not contain '..'", p)
		}
	}
	if filepath.Clean(p) != p {
		return fmt.Errorf("invalid payload path %q: not in canonical form", p)
	}
	return nil
}

func writeFiles(root string, payload map[string]fileProjection) error {
	for p, f := range payload {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("creating directory for %s: %w", p, err)
		}
		mode := os.FileMode(f.Mode) & os.ModePerm
		if err := os.WriteFile(full, f.Data, mode); err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
		// WriteFile's mode is subject to the umask.
		if err := os.Chmod(full, mode); err != nil {
			return fmt.Errorf("setting mode of %s: %w", p, err)
		}
		if f.FsUser != nil {
			if err := os.Lchown(full, int(*f.FsUser), -1); err != nil {
				return fmt.Errorf("setting owner of %s: %w", p, err)
			}
		}
	}
	return nil
}

// dirMatchesPayload reports whether tsDir holds exactly the payload files
// with the same contents and modes.
func dirMatchesPayload(tsDir string, payload map[string]fileProjection, extraMode os.FileMode) (bool, error) {
	seen := 0
	match := true
	err := filepath.WalkDir(tsDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(tsDir, path)
		want, ok := payload[rel]
		if !ok || !d.Type().IsRegular() {
			match = false
			return filepath.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm() != (os.FileMode(want.Mode)&os.ModePerm|extraMode) || info.Size() != int64(len(want.Data)) {
			match = false
			return filepath.SkipAll
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && want.FsUser != nil && int64(st.Uid) != *want.FsUser {
			match = false
			return filepath.SkipAll
		}
		got, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want.Data) {
			match = false
			return filepath.SkipAll
		}
		seen++
		return nil
	})
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("comparing %s with the new payload: %w", tsDir, err)
	}
	return match && seen == len(payload), nil
}

func topLevelNames(payload map[string]fileProjection) map[string]bool {
	names := make(map[string]bool, len(payload))
	for p := range payload {
		first, _, _ := strings.Cut(p, "/")
		names[first] = true
	}
	return names
}

// ensureUserLinks creates dir/<name> -> ..data/<name> for every top-level
// payload name.
func ensureUserLinks(dir string, payload map[string]fileProjection) error {
	names := make([]string, 0, len(payload))
	for n := range topLevelNames(payload) {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		link := filepath.Join(dir, n)
		target := filepath.Join(dataDirName, n)
		if got, err := os.Readlink(link); err == nil && got == target {
			continue
		}
		if err := os.RemoveAll(link); err != nil {
			return fmt.Errorf("replacing %s: %w", link, err)
		}
		if err := os.Symlink(target, link); err != nil {
			return fmt.Errorf("linking %s: %w", link, err)
		}
	}
	return nil
}

// removeStale deletes old timestamped directories and user-visible links
// that the new payload no longer has.
func removeStale(dir, currentTS string, payload map[string]fileProjection) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("listing %s: %w", dir, err)
	}
	keep := topLevelNames(payload)
	var errs []error
	for _, e := range entries {
		name := e.Name()
		full := filepath.Join(dir, name)
		switch {
		case name == dataDirName || name == currentTS:
		case strings.HasPrefix(name, "..") && e.IsDir():
			if err := os.RemoveAll(full); err != nil {
				errs = append(errs, err)
			}
		case !strings.HasPrefix(name, "..") && !keep[name] && e.Type()&fs.ModeSymlink != 0:
			// Only our own links into ..data are ours to remove.
			if target, err := os.Readlink(full); err == nil && strings.HasPrefix(target, dataDirName+"/") {
				if err := os.Remove(full); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("removing stale payload entries in %s: %v", dir, errs)
	}
	return nil
}
