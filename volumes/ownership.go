package volumes

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	v1 "k8s.io/api/core/v1"
)

// Permission bits added for the fsGroup, as upstream SetVolumeOwnership
// does: group read (read-only volumes) or read-write, plus search and
// setgid on directories so new files inherit the group.
const (
	rwMask   = os.FileMode(0o660)
	roMask   = os.FileMode(0o440)
	execMask = os.FileMode(0o110)
)

func fsGroupOf(pod *v1.Pod) *int64 {
	if pod.Spec.SecurityContext == nil {
		return nil
	}
	return pod.Spec.SecurityContext.FSGroup
}

// fsUserOf returns the user every init and app container runs as, when they
// all agree and it is known (container runAsUser, else the pod's); nil
// otherwise. Upstream gives projected tokens to that user (mode 0600).
func fsUserOf(pod *v1.Pod) *int64 {
	var podUser *int64
	if pod.Spec.SecurityContext != nil {
		podUser = pod.Spec.SecurityContext.RunAsUser
	}
	var user *int64
	all := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, c := range all {
		u := podUser
		if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
			u = c.SecurityContext.RunAsUser
		}
		if u == nil || (user != nil && *user != *u) {
			return nil
		}
		user = u
	}
	return user
}

// applyFSGroup gives the volume to the pod's fsGroup: group ownership of
// everything under dir, symlinks included (the link itself, as upstream's
// Lchown), and the group bits above on all but symlinks (a chmod would reach
// the link's target).
func applyFSGroup(dir string, gid int64, readOnly bool) error {
	mask := rwMask
	if readOnly {
		mask = roMask
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, -1, int(gid)); err != nil {
			return fmt.Errorf("setting group %d on %s: %w", gid, path, err)
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m := mask
		if info.IsDir() {
			m |= os.ModeSetgid | execMask
		}
		if err := os.Chmod(path, info.Mode()|m); err != nil {
			return fmt.Errorf("setting mode of %s for fsGroup: %w", path, err)
		}
		return nil
	})
}

// fsGroupChangePolicyOf is the pod's fsGroupChangePolicy; unset is Always.
func fsGroupChangePolicyOf(pod *v1.Pod) v1.PodFSGroupChangePolicy {
	if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroupChangePolicy != nil {
		return *sc.FSGroupChangePolicy
	}
	return v1.FSGroupChangeAlways
}

// fsGroupChangeNeeded is upstream's OnRootMismatch test: the change is
// skipped only when the volume's root is a directory that already has the
// group, the group bits applyFSGroup would add and the setgid bit.
func fsGroupChangeNeeded(dir string, gid int64, readOnly bool) bool {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int64(st.Gid) != gid {
		return true
	}
	want := rwMask
	if readOnly {
		want = roMask
	}
	want |= execMask
	return fi.Mode().Perm()&want != want || fi.Mode()&os.ModeSetgid == 0
}
