package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Extras are what the flags add to an image kind's base: files from the host (with the shared
// libraries a dynamic executable needs), directories, symlinks, small text files, lines of
// /etc/passwd and /etc/group, and the image config's entrypoint, cmd, user and working dir.
// The upstream e2e test images (agnhost, nginx, nonroot, nonewprivs, ...) are built this way.
type Extras struct {
	Files      []string // HOST:IMAGE[:MODE] (MODE octal, e.g. 4755; default the host file's)
	ELFs       []string // HOST:IMAGE: like Files, plus every library ldd names, at its host path
	Dirs       []string // IMAGE[:MODE] (default 0755)
	Symlinks   []string // IMAGE:TARGET
	Texts      []string // IMAGE=CONTENT, a 0644 file; "\n" in CONTENT is a newline
	Passwd     []string // lines appended to /etc/passwd
	Group      []string // lines appended to /etc/group
	Entrypoint string   // JSON array
	Cmd        string   // JSON array
	User       string
	WorkingDir string
}

// Host is how Apply reads the host: file contents and modes, and an executable's libraries.
type Host interface {
	ReadFile(name string) ([]byte, fs.FileMode, error)
	// Libraries returns the absolute paths of the shared libraries and the loader that
	// the dynamic executable name needs ("" for a static one).
	Libraries(name string) ([]string, error)
}

// Apply adds ex to spec. Later entries replace earlier ones of the same path (so a file can
// replace a busybox applet link), and every entry's parent directories exist.
func Apply(spec ImageSpec, ex Extras, host Host) (ImageSpec, error) {
	entries := append([]Entry(nil), spec.Entries...)
	addFile := func(hostPath, imagePath, mode string) error {
		content, m, err := host.ReadFile(hostPath)
		if err != nil {
			return fmt.Errorf("reading %s: %w", hostPath, err)
		}
		perm := int64(m.Perm())
		if m&fs.ModeSetuid != 0 {
			perm |= 0o4000
		}
		if mode != "" {
			p, err := strconv.ParseInt(mode, 8, 64)
			if err != nil {
				return fmt.Errorf("mode %q of %s: %w", mode, imagePath, err)
			}
			perm = p
		}
		entries = append(entries, Entry{Path: imagePath, Mode: perm, Content: content})
		return nil
	}
	for _, f := range ex.Files {
		parts := strings.SplitN(f, ":", 3)
		if len(parts) < 2 || parts[0] == "" || !path.IsAbs(parts[1]) {
			return spec, fmt.Errorf("-file %q: want HOST:IMAGE[:MODE] with an absolute IMAGE path", f)
		}
		mode := ""
		if len(parts) == 3 {
			mode = parts[2]
		}
		if err := addFile(parts[0], parts[1], mode); err != nil {
			return spec, err
		}
	}
	libs := map[string]bool{}
	for _, f := range ex.ELFs {
		hostPath, imagePath, ok := strings.Cut(f, ":")
		if !ok || hostPath == "" || !path.IsAbs(imagePath) {
			return spec, fmt.Errorf("-elf %q: want HOST:IMAGE with an absolute IMAGE path", f)
		}
		if err := addFile(hostPath, imagePath, ""); err != nil {
			return spec, err
		}
		ls, err := host.Libraries(hostPath)
		if err != nil {
			return spec, fmt.Errorf("libraries of %s: %w", hostPath, err)
		}
		for _, l := range ls {
			libs[l] = true
		}
	}
	sortedLibs := make([]string, 0, len(libs))
	for l := range libs {
		sortedLibs = append(sortedLibs, l)
	}
	sort.Strings(sortedLibs)
	for _, l := range sortedLibs {
		if err := addFile(l, l, ""); err != nil {
			return spec, err
		}
	}
	for _, d := range ex.Dirs {
		p, mode, _ := strings.Cut(d, ":")
		perm := int64(0o755)
		if mode != "" {
			m, err := strconv.ParseInt(mode, 8, 64)
			if err != nil {
				return spec, fmt.Errorf("-mkdir %q: %w", d, err)
			}
			perm = m
		}
		if !path.IsAbs(p) {
			return spec, fmt.Errorf("-mkdir %q: want an absolute path", d)
		}
		entries = append(entries, Entry{Path: p, Dir: true, Mode: perm})
	}
	for _, s := range ex.Symlinks {
		p, target, ok := strings.Cut(s, ":")
		if !ok || !path.IsAbs(p) || target == "" {
			return spec, fmt.Errorf("-symlink %q: want IMAGE:TARGET", s)
		}
		entries = append(entries, Entry{Path: p, Linkname: target, Mode: 0o777})
	}
	for _, t := range ex.Texts {
		p, content, ok := strings.Cut(t, "=")
		if !ok || !path.IsAbs(p) {
			return spec, fmt.Errorf("-text %q: want IMAGE=CONTENT", t)
		}
		entries = append(entries, Entry{Path: p, Mode: 0o644, Content: []byte(strings.ReplaceAll(content, `\n`, "\n"))})
	}
	entries = appendLines(entries, "/etc/passwd", ex.Passwd)
	entries = appendLines(entries, "/etc/group", ex.Group)
	out := spec
	out.Entries = withParents(dedupe(entries))
	for _, a := range []struct {
		flag, val string
		dst       *[]string
	}{{"-entrypoint", ex.Entrypoint, &out.Entrypoint}, {"-cmd", ex.Cmd, &out.Cmd}} {
		if a.val == "" {
			continue
		}
		var v []string
		if err := json.Unmarshal([]byte(a.val), &v); err != nil {
			return spec, fmt.Errorf("%s %q: want a JSON array of strings: %w", a.flag, a.val, err)
		}
		*a.dst = v
	}
	if ex.User != "" {
		out.User = ex.User
	}
	if ex.WorkingDir != "" {
		out.WorkingDir = ex.WorkingDir
	}
	return out, nil
}

// appendLines appends lines to the regular file name among entries (creating it 0644).
func appendLines(entries []Entry, name string, lines []string) []Entry {
	if len(lines) == 0 {
		return entries
	}
	var content []byte
	mode := int64(0o644)
	for i := len(entries) - 1; i >= 0; i-- {
		if path.Clean(entries[i].Path) == name && !entries[i].Dir && entries[i].Linkname == "" {
			content = append([]byte(nil), entries[i].Content...)
			mode = entries[i].Mode
			break
		}
	}
	for _, l := range lines {
		content = append(content, l...)
		content = append(content, '\n')
	}
	return append(entries, Entry{Path: name, Mode: mode, Content: content})
}

// dedupe keeps the last entry of each path, in the order of first appearance.
func dedupe(entries []Entry) []Entry {
	last := map[string]int{}
	for i, e := range entries {
		last[path.Clean(e.Path)] = i
	}
	var out []Entry
	seen := map[string]bool{}
	for _, e := range entries {
		p := path.Clean(e.Path)
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, entries[last[p]])
	}
	return out
}

// withParents adds a 0755 directory for every missing parent of an entry.
func withParents(entries []Entry) []Entry {
	have := map[string]bool{"/": true}
	for _, e := range entries {
		have[path.Clean(e.Path)] = true
	}
	out := append([]Entry(nil), entries...)
	for _, e := range entries {
		for d := path.Dir(path.Clean(e.Path)); !have[d]; d = path.Dir(d) {
			have[d] = true
			out = append(out, Entry{Path: d, Dir: true, Mode: 0o755})
		}
	}
	return out
}

// parseLdd reads `ldd` output: the absolute paths of the libraries and the loader.
func parseLdd(out string) []string {
	var libs []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[1] == "=>" && path.IsAbs(f[2]):
			libs = append(libs, f[2]) // libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)
		case len(f) >= 1 && path.IsAbs(f[0]):
			libs = append(libs, f[0]) // /lib64/ld-linux-x86-64.so.2 (0x...)
		}
	}
	return libs
}
