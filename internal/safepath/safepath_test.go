package safepath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// tree is a volume root next to a directory it must never reach.
type tree struct {
	root, outside string
}

// newTree builds root (mode 0777, like an emptyDir) with:
//
//	d/f            a file            v1..2/         a legal name with dots
//	in -> d        link inside       fl -> d/f      link to a file inside
//	..2024/key     configMap-style:  ..data -> ..2024, key -> ..data/key
//	dang -> nothing                  loop -> loop
//	escape -> /    up -> ../outside  abs -> <outside>   d/up -> ../../outside
//	outf -> ../outside/secret        (a file outside)
func newTree(t testing.TB) tree {
	t.Helper()
	base := t.TempDir()
	tr := tree{root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{tr.root, tr.outside, filepath.Join(tr.root, "d"), filepath.Join(tr.root, "v1..2"), filepath.Join(tr.root, "..2024")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(tr.root, 0o777); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"d/f": "file", "..2024/key": "value"} {
		if err := os.WriteFile(filepath.Join(tr.root, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(tr.outside, "secret"), []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"in": "d", "fl": "d/f", "..data": "..2024", "key": "..data/key",
		"dang": "nothing", "loop": "loop",
		"escape": "/", "up": "../outside", "abs": tr.outside, "d/up": "../../outside", "outf": "../outside/secret",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(tr.root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

// realPath is where the kernel says f is.
func realPath(t testing.TB, f *os.File) string {
	t.Helper()
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// assertInside fails unless f is root or below it.
func (tr tree) assertInside(t testing.TB, sub string, f *os.File) {
	t.Helper()
	p := realPath(t, f)
	if p != tr.root && !strings.HasPrefix(p, tr.root+"/") {
		t.Fatalf("sub path %q resolved to %s, outside %s", sub, p, tr.root)
	}
}

// assertOutsideUntouched fails if anything but the planted secret is outside.
func (tr tree) assertOutsideUntouched(t testing.TB) {
	t.Helper()
	entries, err := os.ReadDir(tr.outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "secret" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("outside directory changed: %v", names)
	}
}

func TestOpenResolvesInsideRoot(t *testing.T) {
	tr := newTree(t)
	tests := []struct {
		sub, want string
		dir       bool
	}{
		{sub: "", want: ".", dir: true},
		{sub: ".", want: ".", dir: true},
		{sub: "d", want: "d", dir: true},
		{sub: "d/f", want: "d/f"},
		{sub: "./d//f", want: "d/f"},
		{sub: "v1..2", want: "v1..2", dir: true},
		{sub: "in", want: "d", dir: true},
		{sub: "in/f", want: "d/f"},
		{sub: "fl", want: "d/f"},
		{sub: "key", want: "..2024/key"},
		{sub: "..data/key", want: "..2024/key"},
	}
	for _, tt := range tests {
		t.Run(tt.sub, func(t *testing.T) {
			f, err := Open(tr.root, tt.sub)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if got, want := realPath(t, f), filepath.Join(tr.root, tt.want); got != want {
				t.Errorf("resolved to %s, want %s", got, want)
			}
			fi, err := f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			if fi.IsDir() != tt.dir {
				t.Errorf("IsDir = %v, want %v", fi.IsDir(), tt.dir)
			}
		})
	}
}

func TestOpenRefusesEscapes(t *testing.T) {
	tr := newTree(t)
	tests := []struct {
		sub  string
		want error
	}{
		{"escape", ErrEscape},
		{"escape/etc", ErrEscape},
		{"up", ErrEscape},
		{"up/secret", ErrEscape},
		{"abs", ErrEscape},
		{"d/up", ErrEscape},
		{"in/up/secret", ErrEscape},
		{"outf", ErrEscape},
		{"..", ErrBackstep},
		{"../outside", ErrBackstep},
		{"d/../..", ErrBackstep},
		{"d/..", ErrBackstep},
		{"/etc", ErrAbsolute},
		{"dang", fs.ErrNotExist},
		{"dang/x", fs.ErrNotExist},
		{"loop", syscall.ELOOP},
		{"d/f/x", syscall.ENOTDIR},
	}
	for _, tt := range tests {
		t.Run(tt.sub, func(t *testing.T) {
			for name, fn := range map[string]func(string, string) (*os.File, error){"Open": Open, "MkdirAll": MkdirAll} {
				f, err := fn(tr.root, tt.sub)
				if err == nil {
					p := realPath(t, f)
					f.Close()
					t.Fatalf("%s(%q) = %s, want error %v", name, tt.sub, p, tt.want)
				}
				if !errors.Is(err, tt.want) {
					t.Errorf("%s(%q) error %v, want %v", name, tt.sub, err, tt.want)
				}
			}
			tr.assertOutsideUntouched(t)
		})
	}
}

// TestEscapeAtEveryPosition puts a link out of the root at each position of
// a/b/c (relative and absolute) and checks neither Open nor MkdirAll passes it.
func TestEscapeAtEveryPosition(t *testing.T) {
	parts := []string{"a", "b", "c"}
	for pos := range parts {
		for _, kind := range []string{"relative", "absolute", "dangling"} {
			t.Run(fmt.Sprintf("%s at %d", kind, pos), func(t *testing.T) {
				tr := newTree(t)
				dir := tr.root
				for _, p := range parts[:pos] {
					dir = filepath.Join(dir, p)
					if err := os.Mkdir(dir, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				target := strings.Repeat("../", pos+1) + "outside"
				switch kind {
				case "absolute":
					target = tr.outside
				case "dangling":
					target += "/new"
				}
				if err := os.Symlink(target, filepath.Join(dir, parts[pos])); err != nil {
					t.Fatal(err)
				}
				sub := strings.Join(parts, "/")
				for name, fn := range map[string]func(string, string) (*os.File, error){"Open": Open, "MkdirAll": MkdirAll} {
					for _, s := range []string{strings.Join(parts[:pos+1], "/"), sub} {
						f, err := fn(tr.root, s)
						if err == nil {
							p := realPath(t, f)
							f.Close()
							t.Fatalf("%s(%q) = %s, want an error", name, s, p)
						}
						if !errors.Is(err, ErrEscape) {
							t.Errorf("%s(%q) error %v, want %v", name, s, err, ErrEscape)
						}
					}
				}
				tr.assertOutsideUntouched(t)
			})
		}
	}
}

func TestMkdirAllCreatesWithRootMode(t *testing.T) {
	for _, mode := range []os.FileMode{0o777, 0o750, os.ModeSetgid | 0o775} {
		t.Run(mode.String(), func(t *testing.T) {
			tr := newTree(t)
			if err := os.Chmod(tr.root, mode); err != nil {
				t.Fatal(err)
			}
			f, err := MkdirAll(tr.root, "in/new/deeper")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if got, want := realPath(t, f), filepath.Join(tr.root, "d/new/deeper"); got != want {
				t.Errorf("created %s, want %s", got, want)
			}
			for _, p := range []string{"d/new", "d/new/deeper"} {
				fi, err := os.Lstat(filepath.Join(tr.root, p))
				if err != nil {
					t.Fatal(err)
				}
				if got := fi.Mode() & (os.ModePerm | os.ModeSetgid); !fi.IsDir() || got != mode {
					t.Errorf("%s: mode %v, want directory %v", p, fi.Mode(), mode)
				}
			}
			// Existing components keep their mode; an existing file is returned as is.
			if fi, _ := os.Stat(filepath.Join(tr.root, "d")); fi.Mode().Perm() != 0o755 {
				t.Errorf("existing d changed mode to %v", fi.Mode())
			}
			ff, err := MkdirAll(tr.root, "fl")
			if err != nil {
				t.Fatal(err)
			}
			defer ff.Close()
			if got := realPath(t, ff); got != filepath.Join(tr.root, "d/f") {
				t.Errorf("MkdirAll of a link to a file = %s", got)
			}
		})
	}
}

func TestMkdirAllDoesNotCreateThroughDanglingLink(t *testing.T) {
	tr := newTree(t)
	if _, err := MkdirAll(tr.root, "dang/x"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("MkdirAll through a dangling link: %v, want not-exist", err)
	}
	if _, err := os.Lstat(filepath.Join(tr.root, "nothing")); !os.IsNotExist(err) {
		t.Errorf("link target was created: %v", err)
	}
}

// TestSwapDirForSymlink exchanges a directory and a symlink out of the root
// (renameat2 RENAME_EXCHANGE, so the name always exists) while Open and
// MkdirAll walk through that name: whatever the interleaving, each call
// resolves inside the root or fails, and nothing appears outside.
func TestSwapDirForSymlink(t *testing.T) {
	tr := newTree(t)
	race, asLink := filepath.Join(tr.root, "race"), filepath.Join(tr.root, "race.link")
	if err := os.MkdirAll(filepath.Join(race, "sub"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside", asLink); err != nil {
		t.Fatal(err)
	}
	exchange := func() error {
		return unix.Renameat2(unix.AT_FDCWD, race, unix.AT_FDCWD, asLink, unix.RENAME_EXCHANGE)
	}
	if err := exchange(); errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		t.Skipf("the temp dir's filesystem cannot exchange names: %v", err)
	} else if err != nil || exchange() != nil {
		t.Fatalf("exchanging %s and %s: %v", race, asLink, err)
	}
	stop := make(chan struct{})
	swapErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				swapErr <- nil
				return
			default:
			}
			if err := exchange(); err != nil {
				swapErr <- err
				return
			}
		}
	}()
	for i := 0; i < 3000; i++ {
		fn, sub := Open, "race/sub"
		if i%2 == 1 {
			fn, sub = MkdirAll, fmt.Sprintf("race/new%d", i)
		}
		f, err := fn(tr.root, sub)
		if err != nil {
			if !errors.Is(err, ErrEscape) && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s: unexpected error %v", sub, err)
			}
			continue
		}
		tr.assertInside(t, sub, f)
		f.Close()
	}
	close(stop)
	if err := <-swapErr; err != nil {
		t.Fatalf("swapping: %v", err)
	}
	tr.assertOutsideUntouched(t)
}

// TestOpenRegularNoFollow: only a regular file reached through no link at all
// is opened for reading. A FIFO or device is refused without being opened
// (a plain open of the FIFO would block this test: returning is the proof).
func TestOpenRegularNoFollow(t *testing.T) {
	tr := newTree(t)
	if err := unix.Mkfifo(filepath.Join(tr.root, "d", "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(tr.root, "d", "null"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Skipf("cannot make a device node here: %v", err)
	}
	tests := []struct {
		sub  string
		want error // nil: opened, reads "file"
	}{
		{sub: "d/f"},
		{sub: "./d//f"},
		{sub: "fl", want: ErrSymlink},          // a link inside the root, last component
		{sub: "in/f", want: ErrSymlink},        // a link inside the root, directory component
		{sub: "outf", want: ErrSymlink},        // a link out of the root
		{sub: "up/secret", want: ErrSymlink},   // a directory link out of the root
		{sub: "d/up/secret", want: ErrSymlink}, // deeper
		{sub: "d/fifo", want: ErrNotRegular},
		{sub: "d/null", want: ErrNotRegular},
		{sub: "d", want: ErrNotRegular},
		{sub: "../outside/secret", want: ErrBackstep},
		{sub: "d/missing", want: fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.sub, func(t *testing.T) {
			f, err := OpenRegularNoFollow(tr.root, tt.sub)
			if tt.want != nil {
				if !errors.Is(err, tt.want) {
					t.Fatalf("err = %v, want %v", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			b := make([]byte, 16)
			n, err := f.Read(b)
			if err != nil || string(b[:n]) != "file" {
				t.Fatalf("read %q, %v; want %q", b[:n], err, "file")
			}
		})
	}
}

// TestReopenDirectory: with dirs, Reopen gives a directory that can be listed.
func TestReopenDirectory(t *testing.T) {
	tr := newTree(t)
	p, err := Open(tr.root, "in")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := Reopen(p, false); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("Reopen(dir, false) err = %v, want ErrNotRegular", err)
	}
	d, err := Reopen(p, true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	sort.Strings(names)
	if err != nil || strings.Join(names, ",") != "f,up" {
		t.Fatalf("listing = %v, %v; want [f up]", names, err)
	}
}
