package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRI label keys the upstream kubelet (and nodelet) put on sandboxes and containers. Spelled
// out here so the test framework does not depend on the product's cri package.
const (
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"
)

// CRIClient is a small CRI client for checking what a node agent did to the runtime. The raw
// gRPC clients are exposed for anything the helpers do not cover.
type CRIClient struct {
	Runtime runtimeapi.RuntimeServiceClient
	Image   runtimeapi.ImageServiceClient
	conn    *grpc.ClientConn
	// ctr is a ctr command bound to the runtime's containerd and CRI namespace (the rig's
	// CTR wrapper), "" when there is none: the way past what CRI cannot clean up.
	ctr string
}

// DialOption adjusts DialCRI.
type DialOption func(*CRIClient)

// WithCtr names a ctr command bound to the same containerd and its k8s.io namespace, for
// the tasks containerd leaks past CRI (see RemoveAllPodSandboxes and Tasks).
func WithCtr(path string) DialOption { return func(c *CRIClient) { c.ctr = path } }

// DialCRI connects to a CRI endpoint such as unix:///var/lib/nodelet-rig/run/containerd.sock.
// The connection is lazy; the first call reports an unreachable runtime.
func DialCRI(endpoint string, opts ...DialOption) (*CRIClient, error) {
	if !strings.HasPrefix(endpoint, "unix://") {
		return nil, fmt.Errorf("dialing CRI: endpoint %q is not unix://", endpoint)
	}
	conn, err := grpc.NewClient(endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return nil, fmt.Errorf("dialing CRI %s: %w", endpoint, err)
	}
	c := &CRIClient{
		Runtime: runtimeapi.NewRuntimeServiceClient(conn),
		Image:   runtimeapi.NewImageServiceClient(conn),
		conn:    conn,
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Close closes the connection.
func (c *CRIClient) Close() error { return c.conn.Close() }

// Version returns the runtime's name and version.
func (c *CRIClient) Version(ctx context.Context) (*runtimeapi.VersionResponse, error) {
	v, err := c.Runtime.Version(ctx, &runtimeapi.VersionRequest{Version: "v1"})
	if err != nil {
		return nil, fmt.Errorf("asking CRI for its version: %w", err)
	}
	return v, nil
}

// PodSandboxes lists sandboxes whose labels include all of labels (nil: all sandboxes).
func (c *CRIClient) PodSandboxes(ctx context.Context, labels map[string]string) ([]*runtimeapi.PodSandbox, error) {
	r, err := c.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: labels},
	})
	if err != nil {
		return nil, fmt.Errorf("listing pod sandboxes %v: %w", labels, err)
	}
	return r.Items, nil
}

// Containers lists containers whose labels include all of labels (nil: all containers).
func (c *CRIClient) Containers(ctx context.Context, labels map[string]string) ([]*runtimeapi.Container, error) {
	r, err := c.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{LabelSelector: labels},
	})
	if err != nil {
		return nil, fmt.Errorf("listing containers %v: %w", labels, err)
	}
	return r.Containers, nil
}

// PodContainers lists the containers of the pod with this UID.
func (c *CRIClient) PodContainers(ctx context.Context, podUID string) ([]*runtimeapi.Container, error) {
	return c.Containers(ctx, map[string]string{LabelPodUID: podUID})
}

// PodSandboxesOf lists the sandboxes of the pod with this UID.
func (c *CRIClient) PodSandboxesOf(ctx context.Context, podUID string) ([]*runtimeapi.PodSandbox, error) {
	return c.PodSandboxes(ctx, map[string]string{LabelPodUID: podUID})
}

// ImageTags returns every tag of every image the runtime has.
func (c *CRIClient) ImageTags(ctx context.Context) ([]string, error) {
	r, err := c.Image.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	var tags []string
	for _, img := range r.Images {
		tags = append(tags, img.RepoTags...)
	}
	return tags, nil
}

// RemoveAllPodSandboxes stops and removes every sandbox (with its containers and its CNI
// network), so that a test starts on an empty runtime. It returns how many it removed.
//
// containerd can keep a task that a cancelled start created (the CRI call was cut off after
// the task existed), and then refuses to remove its container, "cannot delete running task",
// through CRI forever. With WithCtr such a task is deleted with ctr and the removal retried,
// so that one test's leak does not fail every later test's set-up.
func (c *CRIClient) RemoveAllPodSandboxes(ctx context.Context) (int, error) {
	sbs, err := c.PodSandboxes(ctx, nil)
	if err != nil {
		return 0, err
	}
	// A test can leave a full node (110 pods) behind, and each stop and removal takes
	// containerd a second or more on a loaded machine: one after the other they outlast any
	// fixed deadline. Several at once, each with a deadline of its own.
	sem := make(chan struct{}, clearParallelism)
	errs := make([]error, len(sbs))
	var wg sync.WaitGroup
	for i, sb := range sbs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = c.removeSandbox(ctx, sb)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	// Containers whose sandbox is already gone (should not happen, but a crashed agent can
	// leave anything behind).
	ctrs, err := c.Containers(ctx, nil)
	if err != nil {
		return len(sbs), err
	}
	for _, ctr := range ctrs {
		cctx, cancel := context.WithTimeout(ctx, clearEachTimeout)
		err := c.removeContainer(cctx, ctr.Id)
		cancel()
		if err != nil {
			return len(sbs), err
		}
	}
	return len(sbs), nil
}

// clearParallelism and clearEachTimeout bound RemoveAllPodSandboxes: sandboxes removed at
// once, and the time one sandbox's (or container's) stop and removal may take.
const (
	clearParallelism = 8
	clearEachTimeout = time.Minute
)

func (c *CRIClient) removeSandbox(ctx context.Context, sb *runtimeapi.PodSandbox) error {
	ctx, cancel := context.WithTimeout(ctx, clearEachTimeout)
	defer cancel()
	if _, err := c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
		return fmt.Errorf("stopping sandbox %s (%s): %w", sb.Id, sb.GetMetadata().GetName(), err)
	}
	if err := c.pastLeakedTask(ctx, func() error {
		_, err := c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id})
		return err
	}); err != nil {
		return fmt.Errorf("removing sandbox %s (%s): %w", sb.Id, sb.GetMetadata().GetName(), err)
	}
	return nil
}

func (c *CRIClient) removeContainer(ctx context.Context, id string) error {
	if _, err := c.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 0}); err != nil {
		return fmt.Errorf("stopping container %s: %w", id, err)
	}
	if err := c.pastLeakedTask(ctx, func() error {
		_, err := c.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
		return err
	}); err != nil {
		return fmt.Errorf("removing container %s: %w", id, err)
	}
	return nil
}

// leakedTaskRE finds the container whose task containerd would not let go of, in its CRI
// error "... cannot delete running task <id>: failed precondition".
var leakedTaskRE = regexp.MustCompile(`cannot delete running task ([0-9a-f]{64})`)

// LeakedTaskID is the container ID in containerd's "cannot delete running task" refusal, ""
// for any other error.
func LeakedTaskID(err error) string {
	if err == nil {
		return ""
	}
	if m := leakedTaskRE.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	return ""
}

// pastLeakedTask runs remove; when containerd refuses it for a task it kept, it force-deletes
// that task with ctr and runs remove once more.
func (c *CRIClient) pastLeakedTask(ctx context.Context, remove func() error) error {
	err := remove()
	id := LeakedTaskID(err)
	if id == "" || c.ctr == "" {
		return err
	}
	if out, derr := exec.CommandContext(ctx, c.ctr, "tasks", "delete", "--force", id).CombinedOutput(); derr != nil {
		return errors.Join(err, fmt.Errorf("force-deleting the task containerd kept for container %s: %w: %s", id, derr, strings.TrimSpace(string(out))))
	}
	return remove()
}

// Tasks lists containerd's tasks in the CRI namespace by container ID, each with its status
// as ctr prints it (CREATED, RUNNING, PAUSED, STOPPED). It needs WithCtr.
func (c *CRIClient) Tasks(ctx context.Context) (map[string]string, error) {
	if c.ctr == "" {
		return nil, errors.New("listing containerd tasks: no ctr command (DialCRI WithCtr)")
	}
	out, err := exec.CommandContext(ctx, c.ctr, "tasks", "ls").Output()
	if err != nil {
		return nil, fmt.Errorf("listing containerd tasks with %s: %w", c.ctr, err)
	}
	return ParseCtrTasks(string(out)), nil
}

// ParseCtrTasks reads `ctr tasks ls`: a "TASK PID STATUS" header, then one task per line.
func ParseCtrTasks(out string) map[string]string {
	tasks := map[string]string{}
	for i, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 3 {
			continue
		}
		tasks[f[0]] = f[2]
	}
	return tasks
}

// RunBusyboxPod runs a sandbox and one container of image with command, straight over CRI
// (no node agent). hostNetwork picks the node's network namespace instead of a CNI one.
// logDir receives the container log at <logDir>/<name>.log. It returns the sandbox and
// container IDs; remove them with RemoveAllPodSandboxes or StopPodSandbox+RemovePodSandbox.
func (c *CRIClient) RunBusyboxPod(ctx context.Context, name, image, logDir string, hostNetwork bool, command ...string) (sandboxID, containerID string, err error) {
	sandboxID, containerID, err = c.CreateBusyboxPod(ctx, name, image, logDir, hostNetwork, command...)
	if err != nil {
		return sandboxID, containerID, err
	}
	if _, err := c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: containerID}); err != nil {
		return sandboxID, containerID, fmt.Errorf("starting container %s: %w", name, err)
	}
	return sandboxID, containerID, nil
}

// CreateBusyboxPod is RunBusyboxPod without starting the container.
func (c *CRIClient) CreateBusyboxPod(ctx context.Context, name, image, logDir string, hostNetwork bool, command ...string) (sandboxID, containerID string, err error) {
	netMode := runtimeapi.NamespaceMode_POD
	if hostNetwork {
		netMode = runtimeapi.NamespaceMode_NODE
	}
	uid := fmt.Sprintf("rig-%s-%d", name, time.Now().UnixNano())
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "rig", Uid: uid},
		LogDirectory: logDir,
		Labels:       map[string]string{LabelPodName: name, LabelPodNamespace: "rig", LabelPodUID: uid},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: netMode},
			},
		},
	}
	sb, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbCfg})
	if err != nil {
		return "", "", fmt.Errorf("running sandbox %s: %w", name, err)
	}
	ctr, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: sb.PodSandboxId,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name},
			Image:    &runtimeapi.ImageSpec{Image: image},
			Command:  command,
			LogPath:  name + ".log",
			Labels:   map[string]string{LabelPodUID: uid, LabelContainerName: name},
		},
		SandboxConfig: sbCfg,
	})
	if err != nil {
		return sb.PodSandboxId, "", fmt.Errorf("creating container %s: %w", name, err)
	}
	return sb.PodSandboxId, ctr.ContainerId, nil
}

// ContainerPid is the pid (in the host's pid namespace) of a container's first process, from
// the runtime's verbose ContainerStatus (containerd's info["info"] JSON, field "pid").
func (c *CRIClient) ContainerPid(ctx context.Context, containerID string) (int, error) {
	st, err := c.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID, Verbose: true})
	if err != nil {
		return 0, fmt.Errorf("verbose status of container %s: %w", containerID, err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	raw := st.GetInfo()["info"]
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		return 0, fmt.Errorf("decoding the verbose status of container %s: %w", containerID, err)
	}
	if info.Pid <= 0 {
		return 0, fmt.Errorf("no pid in the verbose status of container %s: %q", containerID, raw)
	}
	return info.Pid, nil
}
