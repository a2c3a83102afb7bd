package framework

import (
	"context"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// KillAndWatch SIGKILLs the container process of the pod's only container and returns the
// time from the kill until a watch of the pod shows the container terminated; it fails the
// test if the exit code is not 137 (SIGKILL) or nothing is seen within a minute.
func (f *Framework) KillAndWatch(ctx context.Context, ns, name string) time.Duration {
	t := f.T
	t.Helper()
	pod, err := f.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting pod %s: %v", name, err)
	}
	if len(pod.Status.ContainerStatuses) != 1 || pod.Status.ContainerStatuses[0].State.Running == nil {
		t.Fatalf("%s is not running: %s", name, DescribePod(pod))
	}
	_, id, _ := strings.Cut(pod.Status.ContainerStatuses[0].ContainerID, "://")
	pid, err := f.CRI.ContainerPid(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	w, err := f.Client.CoreV1().Pods(ns).Watch(wctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
		ResourceVersion: pod.ResourceVersion,
	})
	if err != nil {
		t.Fatalf("watching pod %s: %v", name, err)
	}
	defer w.Stop()
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing %s's process %d: %v", name, pid, err)
	}
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			t.Fatalf("watching %s: %v", name, ev.Object)
		}
		p, ok := ev.Object.(*v1.Pod)
		if !ok || len(p.Status.ContainerStatuses) != 1 {
			continue
		}
		if term := p.Status.ContainerStatuses[0].State.Terminated; term != nil {
			d := time.Since(killed)
			if term.ExitCode != 137 {
				t.Errorf("%s terminated with exit code %d, want 137 (SIGKILL): %s", name, term.ExitCode, DescribePod(p))
			}
			return d
		}
	}
	t.Fatalf("%s: no terminated status within a minute of the kill", name)
	return 0
}
