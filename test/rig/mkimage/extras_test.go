package main

import (
	"bytes"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
)

type fakeHost struct {
	files map[string]string
	modes map[string]fs.FileMode
	libs  map[string][]string
}

func (h fakeHost) ReadFile(name string) ([]byte, fs.FileMode, error) {
	c, ok := h.files[name]
	if !ok {
		return nil, 0, os.ErrNotExist
	}
	m, ok := h.modes[name]
	if !ok {
		m = 0o644
	}
	return []byte(c), m, nil
}

func (h fakeHost) Libraries(name string) ([]string, error) { return h.libs[name], nil }

func entryMap(es []Entry) map[string]Entry {
	m := map[string]Entry{}
	for _, e := range es {
		if _, dup := m[e.Path]; dup {
			panic("duplicate entry " + e.Path)
		}
		m[e.Path] = e
	}
	return m
}

func TestApply(t *testing.T) {
	host := fakeHost{
		files: map[string]string{
			"/usr/bin/nnp": "NNP", "/usr/bin/dash": "DASH", "/lib/x86_64-linux-gnu/libc.so.6": "LIBC",
			"/lib64/ld-linux-x86-64.so.2": "LD", "/src/localhost.crt": "CRT",
		},
		modes: map[string]fs.FileMode{"/usr/bin/dash": 0o755, "/usr/bin/nnp": 0o755},
		libs:  map[string][]string{"/usr/bin/dash": {"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}},
	}
	tests := []struct {
		name    string
		ex      Extras
		check   func(t *testing.T, s ImageSpec)
		wantErr string
	}{
		{
			name: "setuid file in a new directory",
			ex:   Extras{Files: []string{"/usr/bin/nnp:/usr/local/bin/nnp:4755"}, Cmd: `["nnp"]`},
			check: func(t *testing.T, s ImageSpec) {
				m := entryMap(s.Entries)
				if e := m["/usr/local/bin/nnp"]; e.Mode != 0o4755 || string(e.Content) != "NNP" {
					t.Errorf("nnp = mode %o content %q, want 4755 NNP", e.Mode, e.Content)
				}
				if e := m["/usr/local"]; !e.Dir || e.Mode != 0o755 {
					t.Errorf("parent /usr/local = %+v, want a 0755 dir", e)
				}
				if !slices.Equal(s.Cmd, []string{"nnp"}) {
					t.Errorf("cmd = %q", s.Cmd)
				}
			},
		},
		{
			name: "elf replaces an applet link and brings its libraries",
			ex:   Extras{ELFs: []string{"/usr/bin/dash:/bin/sh"}},
			check: func(t *testing.T, s ImageSpec) {
				m := entryMap(s.Entries)
				if e := m["/bin/sh"]; e.Linkname != "" || string(e.Content) != "DASH" || e.Mode != 0o755 {
					t.Errorf("/bin/sh = %+v, want the dash file 0755", e)
				}
				if string(m["/lib64/ld-linux-x86-64.so.2"].Content) != "LD" || string(m["/lib/x86_64-linux-gnu/libc.so.6"].Content) != "LIBC" {
					t.Error("libraries missing")
				}
			},
		},
		{
			name: "passwd and group lines, text, dirs, symlink, user",
			ex: Extras{
				Passwd: []string{"user-defined-in-image:x:1000:1000::/home/u:/bin/sh"}, Group: []string{"group-defined-in-image:x:50000:"},
				Texts: []string{`/usr/share/nginx/html/index.html=<h1>hi</h1>\n`}, Dirs: []string{"/uploads", "/data:0777"},
				Symlinks: []string{"/agnhost-2:agnhost"}, User: "1234", Entrypoint: `["/agnhost"]`,
			},
			check: func(t *testing.T, s ImageSpec) {
				m := entryMap(s.Entries)
				if p := string(m["/etc/passwd"].Content); !strings.HasPrefix(p, "root:x:0:0:") || !strings.HasSuffix(p, "user-defined-in-image:x:1000:1000::/home/u:/bin/sh\n") {
					t.Errorf("/etc/passwd = %q, want the base lines then the added one", p)
				}
				if g := string(m["/etc/group"].Content); !strings.HasSuffix(g, "\ngroup-defined-in-image:x:50000:\n") {
					t.Errorf("/etc/group = %q", g)
				}
				if c := string(m["/usr/share/nginx/html/index.html"].Content); c != "<h1>hi</h1>\n" {
					t.Errorf("index.html = %q", c)
				}
				if m["/data"].Mode != 0o777 || !m["/uploads"].Dir {
					t.Errorf("dirs: /data %+v /uploads %+v", m["/data"], m["/uploads"])
				}
				if m["/agnhost-2"].Linkname != "agnhost" || s.User != "1234" || !slices.Equal(s.Entrypoint, []string{"/agnhost"}) {
					t.Errorf("symlink %+v user %q entrypoint %q", m["/agnhost-2"], s.User, s.Entrypoint)
				}
			},
		},
		{name: "missing host file", ex: Extras{Files: []string{"/nope:/x"}}, wantErr: "reading /nope"},
		{name: "relative image path", ex: Extras{Files: []string{"/usr/bin/nnp:x"}}, wantErr: "absolute"},
		{name: "bad cmd", ex: Extras{Cmd: "nnp"}, wantErr: "JSON array"},
		{name: "bad mode", ex: Extras{Files: []string{"/usr/bin/nnp:/x:9z"}}, wantErr: "mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Apply(BusyboxSpec([]byte("BB"), []string{"sh"}), tt.ex, host)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, s)
			var buf bytes.Buffer
			if err := WriteOCILayout(&buf, s); err != nil {
				t.Fatalf("the result does not write as a layout: %v", err)
			}
		})
	}
}

func TestParseLdd(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n\tlibfoo.so => not found\n"
	got := parseLdd(out)
	want := []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if !slices.Equal(got, want) {
		t.Errorf("parseLdd = %q, want %q", got, want)
	}
}
