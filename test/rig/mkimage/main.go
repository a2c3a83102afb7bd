// Command mkimage writes the e2e rig's local OCI images as OCI layout tars, so that no
// registry is needed: `ctr -n k8s.io images import <tar>` loads them and CRI sees them under
// the name in index.json's io.containerd.image.name annotation.
//
//	mkimage -kind busybox -bin /bin/busybox -name nodelet.local/busybox:latest -o busybox.tar
//	mkimage -kind pause   -bin ./pause      -name nodelet.local/pause:latest   -o pause.tar
//
// Flags add files (-file, -elf with its shared libraries), directories, symlinks, text files,
// /etc/passwd and /etc/group lines and the config's entrypoint, cmd, user and working dir: the
// upstream e2e test images are built so (test/conformance/build.sh).
//
// Output is deterministic (fixed mtimes, sorted entries), so re-running it yields the same
// digests and a re-import is a no-op.
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
)

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	kind := flag.String("kind", "busybox", "image kind: busybox, pause or scratch")
	bin := flag.String("bin", "", "the static binary to put in the image (/bin/busybox, or the pause binary; none for scratch)")
	name := flag.String("name", "", "image reference, e.g. nodelet.local/busybox:latest")
	out := flag.String("o", "", "output OCI layout tar")
	var ex Extras
	flag.Var((*multi)(&ex.Files), "file", "HOST:IMAGE[:MODE] a host file in the image (repeatable)")
	flag.Var((*multi)(&ex.ELFs), "elf", "HOST:IMAGE a host executable and the shared libraries ldd names (repeatable)")
	flag.Var((*multi)(&ex.Dirs), "mkdir", "IMAGE[:MODE] a directory (repeatable)")
	flag.Var((*multi)(&ex.Symlinks), "symlink", "IMAGE:TARGET a symlink (repeatable)")
	flag.Var((*multi)(&ex.Texts), "text", `IMAGE=CONTENT a 0644 file, "\n" a newline (repeatable)`)
	flag.Var((*multi)(&ex.Passwd), "passwd", "a line appended to /etc/passwd (repeatable)")
	flag.Var((*multi)(&ex.Group), "group", "a line appended to /etc/group (repeatable)")
	flag.StringVar(&ex.Entrypoint, "entrypoint", "", `the entrypoint as a JSON array, e.g. ["/agnhost"]`)
	flag.StringVar(&ex.Cmd, "cmd", "", `the cmd as a JSON array, e.g. ["pause"]`)
	flag.StringVar(&ex.User, "user", "", "the image config's user")
	flag.StringVar(&ex.WorkingDir, "workdir", "", "the image config's working dir")
	flag.Parse()
	if (*bin == "" && *kind != "scratch") || *name == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*kind, *bin, *name, *out, ex); err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(1)
	}
}

func run(kind, bin, name, out string, ex Extras) error {
	var spec ImageSpec
	switch kind {
	case "busybox", "pause":
		content, err := os.ReadFile(bin)
		if err != nil {
			return fmt.Errorf("reading binary %s: %w", bin, err)
		}
		if kind == "pause" {
			spec = PauseSpec(content)
			break
		}
		applets, err := busyboxApplets(bin)
		if err != nil {
			return err
		}
		spec = BusyboxSpec(content, applets)
	case "scratch":
		spec = ScratchSpec()
	default:
		return fmt.Errorf("unknown image kind %q", kind)
	}
	spec, err := Apply(spec, ex, osHost{})
	if err != nil {
		return fmt.Errorf("image %s: %w", name, err)
	}
	spec.Name = name
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("creating %s: %w", out, err)
	}
	if err := WriteOCILayout(f, spec); err != nil {
		f.Close()
		return fmt.Errorf("writing image %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", out, err)
	}
	return nil
}

// osHost reads this machine's files and asks ldd for libraries.
type osHost struct{}

func (osHost) ReadFile(name string) ([]byte, fs.FileMode, error) {
	st, err := os.Stat(name)
	if err != nil {
		return nil, 0, err
	}
	b, err := os.ReadFile(name)
	return b, st.Mode(), err
}

func (osHost) Libraries(name string) ([]string, error) {
	outb, err := exec.Command("ldd", name).CombinedOutput()
	if err != nil {
		// ldd fails on a static executable: it needs nothing.
		if strings.Contains(string(outb), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w: %s", name, err, outb)
	}
	return parseLdd(string(outb)), nil
}

// busyboxApplets asks the busybox binary itself which applets it has, so that every one of
// them gets a symlink.
func busyboxApplets(bin string) ([]string, error) {
	outb, err := exec.Command(bin, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("listing applets of %s: %w", bin, err)
	}
	var applets []string
	for _, l := range strings.Split(string(outb), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.Contains(l, "/") {
			applets = append(applets, l)
		}
	}
	return applets, nil
}
