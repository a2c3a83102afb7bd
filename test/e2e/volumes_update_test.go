//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// volumesReport is the container's loop: every second one line of key=value
// fields, read from the volumes as the container sees them ("-" when a file is
// missing; newlines of the downwardAPI files turned into commas).
const volumesReport = `trap 'exit 0' TERM
f() { cat "$1" 2>/dev/null | tr '\n' ',' || true; }
while true; do
  echo "cm1=$(f /etc/cm/data-1) cm2=$(f /etc/cm/data-2) sec=$(f /etc/sec/data-1) pcm=$(f /etc/proj/cm-data-1) psec=$(f /etc/proj/sec-data-1) plabels=$(f /etc/proj/labels) labels=$(f /etc/podinfo/labels) ann=$(f /etc/podinfo/annotations) opt=$(f /etc/opt/k)"
  sleep 1
done`

// TestVolumesFollowObjectsAndPodMetadata (issue 15): a running pod's configMap,
// secret, projected and downwardAPI volumes follow their objects and the pod's
// labels and annotations, as the upstream kubelet's do: an updated configMap and
// secret (also through a projected volume), a key added and one removed, an
// optional configMap created after the pod started and deleted again, and the
// pod's labels and annotations changed. Before, nodelet wrote the volumes once
// when the pod started and never again (10 NodeConformance specs failed).
//
// Object changes reach running pods at their periodic resync (syncFrequency,
// default 1m, kept here: the test checks the default works), so each wait is
// bounded by the longest resync interval (1m + 25% jitter) plus 30s for the
// relist, the sync and the container's next report. Pod metadata changes arrive
// as pod updates and are synced at once.
func TestVolumesFollowObjectsAndPodMetadata(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})
	const syncFrequency = time.Minute // the default, not set in the config
	objectBound := syncFrequency*5/4 + 30*time.Second
	const metadataBound = 30 * time.Second

	cms := f.Client.CoreV1().ConfigMaps(ns)
	secrets := f.Client.CoreV1().Secrets(ns)
	if _, err := cms.Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"data-1": "value-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"}, Data: map[string][]byte{"data-1": []byte("value-1")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	p := f.BusyboxPod(ns, "volumes", "sh", "-c", volumesReport)
	p.Labels = map[string]string{"app": "volumes", "rev": "1"}
	p.Annotations = map[string]string{"build": "1"}
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
	labelsItem := v1.DownwardAPIVolumeFile{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}}
	annotationsItem := v1.DownwardAPIVolumeFile{Path: "annotations", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.annotations"}}
	p.Spec.Volumes = []v1.Volume{
		{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}},
		{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "sec"}}},
		{Name: "proj", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}, Items: []v1.KeyToPath{{Key: "data-1", Path: "cm-data-1"}}}},
			{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "sec"}, Items: []v1.KeyToPath{{Key: "data-1", Path: "sec-data-1"}}}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{labelsItem}}},
		}}}},
		{Name: "podinfo", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{labelsItem, annotationsItem}}}},
		{Name: "opt", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "opt-cm"}, Optional: ptr.To(true)}}},
	}
	p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{
		{Name: "cm", MountPath: "/etc/cm"},
		{Name: "sec", MountPath: "/etc/sec"},
		{Name: "proj", MountPath: "/etc/proj"},
		{Name: "podinfo", MountPath: "/etc/podinfo"},
		{Name: "opt", MountPath: "/etc/opt"},
	}
	pod := f.CreatePod(ctx, p)
	f.WaitForPodPhase(ctx, ns, pod.Name, v1.PodRunning, 2*time.Minute)
	r := &volumeReports{f: f, ns: ns, pod: pod.Name}
	r.waitFor(ctx, t, "the first contents", 30*time.Second, map[string]string{
		"cm1": "value-1", "cm2": "", "sec": "value-1", "pcm": "value-1", "psec": "value-1",
		"plabels": `app="volumes",rev="1"`, "labels": `app="volumes",rev="1"`, "ann": `build="1",*`, "opt": "",
	})

	// The objects change: configMap value changed and a key added, secret changed,
	// the optional configMap created.
	if _, err := cms.Update(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"data-1": "value-2", "data-2": "added"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.Update(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"}, Data: map[string][]byte{"data-1": []byte("value-2")}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "opt-cm"}, Data: map[string]string{"k": "created"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitFor(ctx, t, "the updated and created objects", objectBound, map[string]string{
		"cm1": "value-2", "cm2": "added", "sec": "value-2", "pcm": "value-2", "psec": "value-2", "opt": "created",
	})

	// The pod's labels and annotations change: a pod update, synced at once.
	patch := []byte(`{"metadata":{"labels":{"rev":"2"},"annotations":{"build":"2"}}}`)
	if _, err := f.Client.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitFor(ctx, t, "the new labels and annotations", metadataBound, map[string]string{
		"plabels": `app="volumes",rev="2"`, "labels": `app="volumes",rev="2"`, "ann": `build="2",*`,
	})

	// A key removed disappears; the deleted optional configMap leaves its volume empty.
	if _, err := cms.Update(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"data-1": "value-3"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "opt-cm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitFor(ctx, t, "the removed key and the deleted optional configMap", objectBound, map[string]string{
		"cm1": "value-3", "cm2": "", "pcm": "value-3", "opt": "",
	})

	// The container never restarted: the contents changed under it.
	got, err := f.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.ContainerStatuses) != 1 || got.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("the container restarted: %s", framework.DescribePod(got))
	}
}

// volumeReports reads the container's latest report line from its log.
type volumeReports struct {
	f       *framework.Framework
	ns, pod string
}

func (r *volumeReports) latest(ctx context.Context) (map[string]string, error) {
	raw, err := r.f.Client.CoreV1().Pods(r.ns).GetLogs(r.pod, &v1.PodLogOptions{TailLines: ptr.To[int64](1)}).Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	line := strings.TrimSpace(string(raw))
	if !strings.HasPrefix(line, "cm1=") {
		return nil, fmt.Errorf("no report line yet: %q", line)
	}
	out := map[string]string{}
	for _, field := range strings.Fields(line) {
		k, v, _ := strings.Cut(field, "=")
		out[k] = v
	}
	return out, nil
}

// matches is got == want, or, for a want ending in "*", got starting with the
// rest (the annotations file: the node agent's own kubernetes.io/config.seen and
// config.source annotations follow the pod's, in the upstream kubelet too).
func matches(got, want string) bool {
	if prefix, ok := strings.CutSuffix(want, "*"); ok {
		return strings.HasPrefix(got, prefix)
	}
	return got == want
}

// waitFor waits until every field of want shows in the container's report, and
// logs how long after the call each field took to get there.
func (r *volumeReports) waitFor(ctx context.Context, t *testing.T, what string, timeout time.Duration, want map[string]string) {
	t.Helper()
	start := time.Now()
	took := map[string]time.Duration{}
	var last map[string]string
	err := framework.WaitFor(ctx, timeout, what+" in the container's volumes", func(ctx context.Context) (bool, error) {
		got, err := r.latest(ctx)
		if err != nil {
			return false, err
		}
		last = got
		for k, v := range want {
			if _, seen := took[k]; !seen && matches(got[k], v) {
				took[k] = time.Since(start)
			}
		}
		return len(took) == len(want), nil
	})
	var lines []string
	for k := range want {
		d, ok := took[k]
		if !ok {
			lines = append(lines, fmt.Sprintf("%s: not %q (last %q)", k, want[k], last[k]))
			continue
		}
		lines = append(lines, fmt.Sprintf("%s after %s", k, d.Round(100*time.Millisecond)))
	}
	sort.Strings(lines)
	t.Logf("%s: %s", what, strings.Join(lines, "; "))
	if err != nil {
		t.Fatal(err)
	}
}
