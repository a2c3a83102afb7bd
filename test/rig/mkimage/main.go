// Command mkimage writes the e2e rig's local OCI images as OCI layout tars, so that no
// registry is needed: `ctr -n k8s.io images import <tar>` loads them and CRI sees them under
// the name in index.json's io.containerd.image.name annotation.
//
//	mkimage -kind busybox -bin /bin/busybox -name nodelet.local/busybox:latest -o busybox.tar
//	mkimage -kind pause   -bin ./pause      -name nodelet.local/pause:latest   -o pause.tar
//
// Output is deterministic (fixed mtimes, sorted entries), so re-running it yields the same
// digests and a re-import is a no-op.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

func main() {
	kind := flag.String("kind", "busybox", "image kind: busybox or pause")
	bin := flag.String("bin", "", "the static binary to put in the image (/bin/busybox, or the pause binary)")
	name := flag.String("name", "", "image reference, e.g. nodelet.local/busybox:latest")
	out := flag.String("o", "", "output OCI layout tar")
	flag.Parse()
	if *bin == "" || *name == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*kind, *bin, *name, *out); err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(1)
	}
}

func run(kind, bin, name, out string) error {
	content, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("reading binary %s: %w", bin, err)
	}
	var spec ImageSpec
	switch kind {
	case "busybox":
		applets, err := busyboxApplets(bin)
		if err != nil {
			return err
		}
		spec = BusyboxSpec(content, applets)
	case "pause":
		spec = PauseSpec(content)
	default:
		return fmt.Errorf("unknown image kind %q", kind)
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
