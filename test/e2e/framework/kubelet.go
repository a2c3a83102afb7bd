package framework

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The upstream kubelet v1.37.2 runs under the same framework as nodelet (issue 32, the swap
// between both agents): the same Dir, RootDir, ConfigPath, kubeconfig and arguments, its own
// log (<Dir>/kubelet.log).

// upstreamKubeletDevicePluginDir is the kubelet's device plugin directory: fixed
// (pluginapi.DevicePluginPath), whatever --root-dir says, and its checkpoint
// kubelet_internal_checkpoint lies there too.
const upstreamKubeletDevicePluginDir = upstreamDevicePluginDir

// KubeletBin is the upstream kubelet v1.37.2: $KUBELET_BIN, else kubelet in the rig's
// binaries ($RIG_BIN_DIR, else rig.env's RIG_BIN_DIR), which test/rig/build-bins.sh builds.
// The test fails, naming both, when there is none: CI builds it, so a missing one is an error,
// not a reason to skip.
func (f *Framework) KubeletBin() string {
	f.T.Helper()
	if p := os.Getenv("KUBELET_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			f.T.Fatalf("KUBELET_BIN: %v", err)
		}
		return p
	}
	dir := os.Getenv("RIG_BIN_DIR")
	if dir == "" {
		dir = f.Env.All["RIG_BIN_DIR"]
	}
	if dir == "" {
		f.T.Fatalf("no upstream kubelet: set KUBELET_BIN, or RIG_BIN_DIR (rig.env has none; is the rig up?)")
	}
	p := filepath.Join(dir, "kubelet")
	if _, err := os.Stat(p); err != nil {
		f.T.Fatalf("no upstream kubelet at %s (%v): run test/rig/build-bins.sh, which builds it with the control plane, or set KUBELET_BIN", p, err)
	}
	return p
}

// agent names the binary for messages: "kubelet" (upstream) or "nodelet".
func (n *Nodelet) agent() string {
	if n.Upstream {
		return "kubelet"
	}
	return "nodelet"
}

// setBin makes bin the binary the next start runs, with its log. With checkUpstream, its
// --version says whether it is the upstream kubelet.
func (n *Nodelet) setBin(bin string, checkUpstream bool) error {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return fmt.Errorf("resolving the node agent binary %s: %w", bin, err)
	}
	if _, err := os.Stat(abs); err != nil {
		return fmt.Errorf("the node agent binary: %w", err)
	}
	upstream := false
	if checkUpstream {
		if upstream, err = isUpstreamKubelet(abs); err != nil {
			return err
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.Bin, n.Upstream = abs, upstream
	n.LogPath = filepath.Join(n.Dir, n.agent()+".log")
	for _, p := range n.logPaths {
		if p == n.LogPath {
			return nil
		}
	}
	n.logPaths = append(n.logPaths, n.LogPath)
	return nil
}

// isUpstreamKubelet runs bin --version: the upstream kubelet says "Kubernetes v1.37.2",
// nodelet names itself.
func isUpstreamKubelet(bin string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("%s --version: %w: %s", bin, err, out)
	}
	v := strings.TrimSpace(string(out))
	return strings.HasPrefix(v, "Kubernetes v") && !strings.Contains(strings.ToLower(v), "nodelet"), nil
}

// SwapBinary stops the running binary (SIGTERM, as Stop) and starts bin in its place with the
// same configuration file, kubeconfig, root dir, static pod dir and arguments: an operator
// replacing the node agent. Runtime state and the Node are kept whatever NodeletOptions say
// (those apply to the first start only). bin may be the upstream kubelet (KubeletBin).
func (n *Nodelet) SwapBinary(bin string) {
	n.f.T.Helper()
	_ = n.Stop()
	if err := n.setBin(bin, true); err != nil {
		n.f.T.Fatal(err)
	}
	if err := n.start(); err != nil {
		n.f.T.Fatal(err)
	}
}

// kubeletCommand is the upstream kubelet's command line wrapped so that its fixed device
// plugin directory is RootDir/device-plugins, as nodelet's is, without touching the host's
// /var/lib/kubelet/device-plugins (the sample device plugin does the same,
// StartSampleDevicePlugin): the kubelet runs in a mount namespace of its own where that
// directory is bind-mounted there. Every other mount it makes is under RootDir (volumes, CSI
// publish targets), which is first made a shared mount on the host, so that those reach the
// host's namespace, where the runtime and nodelet see them (and the kubelet, finding RootDir
// shared already, does not bind it again in its own namespace, as its MakeRShared would).
func (n *Nodelet) kubeletCommand() (*exec.Cmd, error) {
	if err := makeRShared(n.RootDir); err != nil {
		return nil, err
	}
	dp := filepath.Join(n.RootDir, "device-plugins")
	for _, d := range []string{dp, upstreamKubeletDevicePluginDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("creating %s for the kubelet: %w", d, err)
		}
	}
	args := append([]string{"--mount", "--propagation", "unchanged", "--",
		"sh", "-c", `mount --make-private / && mount --bind "$1" "$2" && shift 2 && exec "$@"`, "sh",
		dp, upstreamKubeletDevicePluginDir, n.Bin}, n.Args...)
	return exec.Command("unshare", args...), nil
}

// makeRShared makes dir a mount point (a bind mount of itself) with shared propagation,
// recursively, unless it is one already.
func makeRShared(dir string) error {
	shared, mounted, err := mountPropagation(dir)
	if err != nil {
		return err
	}
	if shared {
		return nil
	}
	if !mounted {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind-mounting %s on itself: %w", dir, err)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making %s a shared mount: %w", dir, err)
	}
	return nil
}

// mountPropagation reads /proc/self/mountinfo: whether dir is a mount point, and a shared one
// (the last mount there counts).
func mountPropagation(dir string) (shared, mounted bool, err error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false, false, fmt.Errorf("resolving %s: %w", dir, err)
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, false, fmt.Errorf("reading mountinfo: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional fields...] - fstype ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 || fields[4] != real {
			continue
		}
		mounted, shared = true, false
		for _, opt := range fields[6:] {
			if opt == "-" {
				break
			}
			if strings.HasPrefix(opt, "shared:") {
				shared = true
			}
		}
	}
	return shared, mounted, sc.Err()
}
