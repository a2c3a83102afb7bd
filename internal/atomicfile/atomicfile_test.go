package atomicfile

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestWriteFileModeAndNoLeftovers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kubelet.key")
	// An existing, too open file: the new one gets exactly the mode asked for.
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	if err := WriteFile(path, []byte("new"), 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "new" {
		t.Fatalf("content %q, %v", got, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %o, want 640 whatever the umask and the old file", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file", len(entries))
	}
}

func TestWriteFileReplacesLinkWithoutFollowing(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("target"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(link, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(target); string(got) != "target" {
		t.Errorf("the link's target was written: %q", got)
	}
	if fi, err := os.Lstat(link); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("link is not a regular file now: %v %v", fi, err)
	}
}

func TestWriteFileFailureKeepsOldContent(t *testing.T) {
	dir := t.TempDir()
	// Renaming a file over a non-empty directory fails after the data was written.
	path := filepath.Join(dir, "busy")
	if err := os.MkdirAll(filepath.Join(path, "child"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("x"), 0o600); err == nil {
		t.Fatal("replacing a non-empty directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after a failed write, want the temporary file removed", len(entries))
	}
}

func TestWriteFileCreatesTheDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pki", "kubelet.key")
	if err := WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "x" {
		t.Errorf("content %q, %v", got, err)
	}
}

// A reader never sees a torn file, only the old or the new content whole.
func TestWriteFileReadersSeeWholeFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	a, b := bytes.Repeat([]byte("a"), 1<<20), bytes.Repeat([]byte("b"), 1<<20)
	if err := WriteFile(path, a, 0o600); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	torn := make(chan int, 1)
	go func() {
		defer close(torn)
		for {
			select {
			case <-stop:
				return
			default:
			}
			got, err := os.ReadFile(path)
			if err != nil || !(bytes.Equal(got, a) || bytes.Equal(got, b)) {
				torn <- len(got)
				return
			}
		}
	}()
	for i := range 50 {
		data := a
		if i%2 == 0 {
			data = b
		}
		if err := WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if n, ok := <-torn; ok {
		t.Fatalf("a reader saw a torn file of %d bytes", n)
	}
}

func TestSetAsideKeepsTheBytes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "allocated_pods_state")
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	aside, err := SetAside(path, time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	if want := path + ".corrupt-1700000000"; aside != want {
		t.Fatalf("set aside at %s, want %s", aside, want)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the corrupt file is still at its path: %v", err)
	}
	if b, err := os.ReadFile(aside); err != nil || string(b) != "garbage" {
		t.Errorf("set-aside content %q, %v", b, err)
	}
}
