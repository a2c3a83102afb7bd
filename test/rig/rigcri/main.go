// Command rigcri is the e2e rig's tiny CRI tool (Debian 12 has no crictl):
//
//	rigcri -endpoint unix:///.../containerd.sock version   # runtime name and version
//	rigcri -endpoint ... images                           # image tags
//	rigcri -endpoint ... ps                               # sandboxes and containers
//	rigcri -endpoint ... [-ctr CTR] cleanup               # stop+remove every sandbox (down.sh)
//	rigcri -endpoint ... smoke -image nodelet.local/busybox:latest
//	    # host-network and CNI sandboxes, each with a busybox container; checks the log
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

func main() {
	endpoint := flag.String("endpoint", "unix:///var/lib/nodelet-rig/run/containerd.sock", "CRI endpoint")
	image := flag.String("image", "nodelet.local/busybox:latest", "image for smoke")
	timeout := flag.Duration("timeout", 60*time.Second, "overall timeout")
	podCIDR := flag.String("pod-cidr", "10.244.0.0/24", "for smoke: the range the CNI pod's IP must be in")
	ctr := flag.String("ctr", "", "for cleanup: a ctr command bound to the same containerd (namespace k8s.io), to delete tasks containerd keeps past CRI")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: rigcri [-endpoint E] version|images|ps|cleanup|smoke")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *endpoint, *ctr, flag.Arg(0), *image, *podCIDR); err != nil {
		fmt.Fprintf(os.Stderr, "rigcri %s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}
}

func run(ctx context.Context, endpoint, ctr, cmd, image, podCIDR string) error {
	c, err := framework.DialCRI(endpoint, framework.WithCtr(ctr))
	if err != nil {
		return err
	}
	defer c.Close()
	switch cmd {
	case "version":
		v, err := c.Version(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("%s %s (CRI %s)\n", v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion)
	case "images":
		tags, err := c.ImageTags(ctx)
		if err != nil {
			return err
		}
		fmt.Println(strings.Join(tags, "\n"))
	case "ps":
		sbs, err := c.PodSandboxes(ctx, nil)
		if err != nil {
			return err
		}
		for _, sb := range sbs {
			fmt.Printf("sandbox %.13s %s/%s %s\n", sb.Id, sb.Metadata.Namespace, sb.Metadata.Name, sb.State)
		}
		ctrs, err := c.Containers(ctx, nil)
		if err != nil {
			return err
		}
		for _, ct := range ctrs {
			fmt.Printf("container %.13s sandbox %.13s %s %s\n", ct.Id, ct.PodSandboxId, ct.Metadata.Name, ct.State)
		}
	case "cleanup":
		n, err := c.RemoveAllPodSandboxes(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("removed %d pod sandboxes\n", n)
	case "smoke":
		return smoke(ctx, c, image, podCIDR)
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
	return nil
}

// smoke runs a host-network and a CNI-network pod and checks each container's output.
func smoke(ctx context.Context, c *framework.CRIClient, image, podCIDR string) error {
	_, podNet, err := net.ParseCIDR(podCIDR)
	if err != nil {
		return fmt.Errorf("parsing -pod-cidr: %w", err)
	}
	logDir, err := os.MkdirTemp("", "rigcri-smoke-")
	if err != nil {
		return fmt.Errorf("creating log dir: %w", err)
	}
	defer os.RemoveAll(logDir)
	for _, hostNet := range []bool{true, false} {
		name := "smoke-cni"
		if hostNet {
			name = "smoke-hostnet"
		}
		dir := filepath.Join(logDir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", dir, err)
		}
		start := time.Now()
		sb, ctr, err := c.RunBusyboxPod(ctx, name, image, dir, hostNet, "sh", "-c", "echo hello-from-$(hostname); ip addr 2>/dev/null | grep -c inet")
		if err != nil {
			return err
		}
		started := time.Since(start)
		var st *runtimeapi.ContainerStatus
		for {
			r, err := c.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr})
			if err != nil {
				return fmt.Errorf("container status: %w", err)
			}
			if st = r.Status; st.State == runtimeapi.ContainerState_CONTAINER_EXITED {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for %s to exit: %w", name, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
		logb, err := os.ReadFile(filepath.Join(dir, name+".log"))
		if err != nil {
			return fmt.Errorf("reading container log: %w", err)
		}
		sbst, err := c.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb})
		if err != nil {
			return fmt.Errorf("sandbox status: %w", err)
		}
		ip := sbst.GetStatus().GetNetwork().GetIp()
		fmt.Printf("%s: sandbox+create+start %v, exit %d, pod IP %q, log:\n%s", name, started.Round(time.Millisecond), st.ExitCode, ip, logb)
		if st.ExitCode != 0 || !strings.Contains(string(logb), "hello-from-") {
			return fmt.Errorf("%s: exit code %d, log %q", name, st.ExitCode, logb)
		}
		if !hostNet && !podNet.Contains(net.ParseIP(ip)) {
			return fmt.Errorf("%s: pod IP %q is not from the rig's CNI range %s", name, ip, podNet)
		}
		if _, err := c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb}); err != nil {
			return fmt.Errorf("stopping sandbox: %w", err)
		}
		if _, err := c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb}); err != nil {
			return fmt.Errorf("removing sandbox: %w", err)
		}
	}
	fmt.Println("smoke: ok")
	return nil
}
