package podconfig

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
)

// fileWatch wakes the static pod file source when something under its path
// changes, so a new or edited manifest (a kubeadm control-plane upgrade) is read
// at once rather than at the next period. It is a hint only: the source re-reads
// the whole path on a wake and still re-reads every period (upstream's file
// source does the same, inotify plus a resync at fileCheckFrequency), which
// covers what inotify does not report: a manifest that is a symlink whose target
// changes elsewhere, a path that does not exist yet, an overflowed event queue,
// and a system out of inotify watches.
//
// A directory is watched itself; a single file is watched through its parent,
// because replacing the file by rename (how editors and kubeadm write) would end
// a watch on the file's own inode.
type fileWatch struct {
	w      *fsnotify.Watcher // nil: polling only
	target string            // the path watched: path, or its parent for a file
	path   string            // the static pod path, cleaned
	isFile bool
}

// newFileWatch returns a watch for path, or one that never wakes if inotify
// cannot be had (the period still covers every change).
func newFileWatch(ctx context.Context, path string) *fileWatch {
	fw := &fileWatch{path: filepath.Clean(path)}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Unable to watch the static pod path, reading it every period only", "path", path)
		return fw
	}
	fw.w = w
	return fw
}

// ensure (re)adds the watch when it is not in place: at the start, after the
// path was created, or after the watched directory was removed or renamed
// (inotify then drops the watch). Called before each read, so a change made
// after the read is always seen by either the watch or the next read.
func (fw *fileWatch) ensure(ctx context.Context) {
	if fw.w == nil {
		return
	}
	target, isFile := fw.path, false
	if fi, err := os.Stat(fw.path); err == nil && !fi.IsDir() {
		target, isFile = filepath.Dir(fw.path), true
	}
	if target != fw.target && fw.target != "" {
		// The path turned from a directory into a file or back.
		_ = fw.w.Remove(fw.target)
	}
	fw.target, fw.isFile = target, isFile
	if slices.Contains(fw.w.WatchList(), target) {
		return
	}
	if err := fw.w.Add(target); err != nil {
		// A missing path is the common case (it is created later); the period retries.
		klog.FromContext(ctx).V(2).Info("Not watching the static pod path yet, reading it every period", "path", target, "err", err)
	}
}

// events is the channel of the watcher's events, nil (blocks forever) when
// polling only.
func (fw *fileWatch) events() <-chan fsnotify.Event {
	if fw.w == nil {
		return nil
	}
	return fw.w.Events
}

// errs is the channel of the watcher's errors, nil when polling only.
func (fw *fileWatch) errs() <-chan error {
	if fw.w == nil {
		return nil
	}
	return fw.w.Errors
}

// relevant says whether ev may change the static pods: for a directory any
// entry but a hidden one (which the source ignores; an atomic write's temporary
// file is usually one) and the directory itself; for a single file that file only.
func (fw *fileWatch) relevant(ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	if fw.isFile {
		return name == fw.path
	}
	return name == fw.path || !strings.HasPrefix(filepath.Base(name), ".")
}

func (fw *fileWatch) close() {
	if fw.w != nil {
		_ = fw.w.Close()
	}
}

// drainEvents takes the events already queued, without waiting.
func drainEvents(ch <-chan fsnotify.Event) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// isOverflow says whether err means events were lost, so the path must be read.
func isOverflow(err error) bool { return errors.Is(err, fsnotify.ErrEventOverflow) }
