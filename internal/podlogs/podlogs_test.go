package podlogs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/internal/safepath"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		path, root, rel string
		err             bool
	}{
		{path: "/var/log/pods/ns_p_uid/c/0.log", root: "/var/log/pods", rel: "ns_p_uid/c/0.log"},
		{path: "/ns_p_uid/c/3.log", root: "/", rel: "ns_p_uid/c/3.log"},
		{path: "/var/log/pods/ns_p_u_id/c/0.log", root: "/var/log/pods", rel: "ns_p_u_id/c/0.log"},
		{path: "var/log/pods/ns_p_uid/c/0.log", err: true},     // relative
		{path: "/var/log/pods/ns_p_uid/c/../0.log", err: true}, // not clean
		{path: "/var/log/pods//ns_p_uid/c/0.log", err: true},
		{path: "/ns_p_uid/0.log", err: true},
		{path: "/c/0.log", err: true},
		{path: "/0.log", err: true},
		{path: "", err: true},
	}
	for _, tt := range tests {
		root, rel, err := Split(tt.path)
		if tt.err {
			if !errors.Is(err, ErrLayout) {
				t.Errorf("Split(%q) = %q, %q, %v; want ErrLayout", tt.path, root, rel, err)
			}
			continue
		}
		if err != nil || root != tt.root || rel != tt.rel {
			t.Errorf("Split(%q) = %q, %q, %v; want %q, %q", tt.path, root, rel, err, tt.root, tt.rel)
		}
	}
}

// TestOpenRefusesLinksAndSpecialFiles: a log file, or its container or pod log
// directory, replaced by a link (to a host file or directory) is refused, and a
// FIFO or device in its place is refused without being opened (a blocking open
// of the FIFO would hang this test).
func TestOpenRefusesLinksAndSpecialFiles(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "pods")
	outside := filepath.Join(base, "host")
	for _, d := range []string{filepath.Join(root, "ns_p_uid", "c"), filepath.Join(outside, "c")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(root, "ns_p_uid", "c", "0.log"), filepath.Join(outside, "c", "0.log"), filepath.Join(outside, "secret")} {
		if err := os.WriteFile(f, []byte("data of "+f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(t *testing.T, pod string, make func(dir string) error) string {
		t.Helper()
		dir := filepath.Join(root, pod)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := make(dir); err != nil {
			t.Skipf("cannot make the planted file: %v", err)
		}
		return filepath.Join(dir, "c", "0.log")
	}
	tests := []struct {
		name string
		make func(dir string) error
		want error
	}{
		{"file link", func(d string) error {
			return errors.Join(os.Mkdir(filepath.Join(d, "c"), 0o755), os.Symlink(filepath.Join(outside, "secret"), filepath.Join(d, "c", "0.log")))
		}, safepath.ErrSymlink},
		{"relative file link", func(d string) error {
			return errors.Join(os.Mkdir(filepath.Join(d, "c"), 0o755), os.Symlink("../../../host/secret", filepath.Join(d, "c", "0.log")))
		}, safepath.ErrSymlink},
		{"container dir link", func(d string) error {
			return os.Symlink(filepath.Join(outside, "c"), filepath.Join(d, "c"))
		}, safepath.ErrSymlink},
		{"fifo", func(d string) error {
			return errors.Join(os.Mkdir(filepath.Join(d, "c"), 0o755), unix.Mkfifo(filepath.Join(d, "c", "0.log"), 0o600))
		}, safepath.ErrNotRegular},
		{"device", func(d string) error {
			return errors.Join(os.Mkdir(filepath.Join(d, "c"), 0o755), unix.Mknod(filepath.Join(d, "c", "0.log"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))))
		}, safepath.ErrNotRegular},
		{"hard link", func(d string) error {
			return errors.Join(os.Mkdir(filepath.Join(d, "c"), 0o755), os.Link(filepath.Join(outside, "secret"), filepath.Join(d, "c", "0.log")))
		}, ErrHardLink},
		{"missing", func(d string) error { return os.Mkdir(filepath.Join(d, "c"), 0o755) }, fs.ErrNotExist},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := mk(t, "ns_p"+string(rune('a'+i))+"_uid", tt.make)
			f, err := Open(path)
			if err == nil {
				f.Close()
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Open(%s) err = %v, want %v", path, err, tt.want)
			}
		})
	}
	t.Run("pod dir link", func(t *testing.T) {
		if err := os.Symlink(outside, filepath.Join(root, "ns_link_uid")); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(filepath.Join(root, "ns_link_uid", "c", "0.log")); !errors.Is(err, safepath.ErrSymlink) {
			t.Fatalf("err = %v, want ErrSymlink", err)
		}
	})
	t.Run("regular", func(t *testing.T) {
		path := filepath.Join(root, "ns_p_uid", "c", "0.log")
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if b, err := io.ReadAll(f); err != nil || string(b) != "data of "+path {
			t.Fatalf("read %q, %v", b, err)
		}
	})
}
