package stats

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// fsInfo is the filesystem access stats needs; a fake in tests.
type fsInfo interface {
	// statfs measures the filesystem holding path and returns its device.
	statfs(path string) (statsapi.FsStats, uint64, error)
	// du sums the bytes and inodes under dir; with dev != 0 it skips a dir on another device.
	du(dir string, dev uint64) (bytes, inodes uint64, err error)
	readDir(dir string) ([]string, error)
}

type osFs struct{}

func (osFs) statfs(path string) (statsapi.FsStats, uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return statsapi.FsStats{}, 0, err
	}
	var fi unix.Stat_t
	if err := unix.Stat(path, &fi); err != nil {
		return statsapi.FsStats{}, 0, err
	}
	bs := uint64(st.Bsize)
	capacity, avail := st.Blocks*bs, st.Bavail*bs
	used := (st.Blocks - st.Bfree) * bs
	inodes, free := st.Files, st.Ffree
	out := statsapi.FsStats{CapacityBytes: &capacity, AvailableBytes: &avail, UsedBytes: &used}
	// Filesystems without an inode table (some tmpfs, btrfs) report 0 inodes: say
	// nothing rather than "0 free".
	if inodes > 0 {
		iused := inodes - free
		out.Inodes, out.InodesFree, out.InodesUsed = &inodes, &free, &iused
	}
	return out, uint64(fi.Dev), nil
}

// du walks dir as `du` does: allocated blocks, each inode once (hard links).
func (osFs) du(dir string, dev uint64) (uint64, uint64, error) {
	var top unix.Stat_t
	if err := unix.Lstat(dir, &top); err != nil {
		return 0, 0, err
	}
	if dev != 0 && uint64(top.Dev) != dev {
		return 0, 0, errors.New("on another filesystem")
	}
	seen := map[uint64]bool{}
	var bytes, inodes uint64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if d.IsDir() && p != dir && uint64(st.Dev) != uint64(top.Dev) {
			return filepath.SkipDir // a mount inside: not ours to count
		}
		if seen[st.Ino] {
			return nil
		}
		seen[st.Ino] = true
		inodes++
		bytes += uint64(st.Blocks) * 512
		return nil
	})
	return bytes, inodes, err
}

func (osFs) readDir(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(es))
	for _, e := range es {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
