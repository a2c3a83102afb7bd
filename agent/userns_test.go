package agent

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/config"
)

// userNamespaces.idsPerPod sizes every pod's range, and maxPods must fit in
// the kubelet's mapping or the start stops, as upstream's.
func TestUserNamespacesIDsPerPod(t *testing.T) {
	handlers := func() ([]*runtimeapi.RuntimeHandler, bool) {
		return []*runtimeapi.RuntimeHandler{{Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}}}, true
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"}, Spec: v1.PodSpec{HostUsers: ptr.To(false)}}
	for _, ids := range []int64{65536, 131072} {
		kc := &kubeletconfigv1beta1.KubeletConfiguration{MaxPods: 110, UserNamespaces: &kubeletconfigv1beta1.UserNamespaces{IDsPerPod: ptr.To(ids)}}
		m, err := newUserNamespaces(context.Background(), config.Resolve(kc).UserNamespaceIDsPerPod, kc.MaxPods, t.TempDir(), handlers)
		if err != nil {
			t.Fatal(err)
		}
		ns, err := m.GetOrCreateUserNamespaceMappings(pod, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := ns.GetUids()[0]; int64(got.GetLength()) != ids || int64(got.GetHostId())%ids != 0 || got.GetHostId() == 0 {
			t.Errorf("idsPerPod %d: mapping %v", ids, got)
		}
	}
	// 2^31 IDs per pod leave room for one pod only.
	kc := &kubeletconfigv1beta1.KubeletConfiguration{MaxPods: 110, UserNamespaces: &kubeletconfigv1beta1.UserNamespaces{IDsPerPod: ptr.To[int64](1 << 31)}}
	_, err := newUserNamespaces(context.Background(), config.Resolve(kc).UserNamespaceIDsPerPod, kc.MaxPods, t.TempDir(), handlers)
	if err == nil || !strings.Contains(err.Error(), "kubelet user assigned IDs are not enough to support 110 pods") {
		t.Errorf("err = %v", err)
	}
}
