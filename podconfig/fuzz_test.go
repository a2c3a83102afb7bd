package podconfig

import (
	"strings"
	"testing"

	"github.com/nodelet/nodelet/internal/podutil"
)

// FuzzDecodeManifest feeds the static pod decoder random manifests (Pods and
// PodLists). Whatever the bytes it must not panic, and every pod it accepts
// must be ready to run here: a valid name ending in the node's name, a
// namespace, a UID that is also its config hash, and the node's name in its
// spec; decoding is deterministic, and pods with different names have
// different UIDs. Seeds: testdata/fuzz/FuzzDecodeManifest.
func FuzzDecodeManifest(f *testing.F) {
	const file, node = "/etc/kubernetes/manifests/fuzz.yaml", "node-a"
	f.Fuzz(func(t *testing.T, data []byte) {
		pods, err := decodeManifest(data, file, node)
		if err != nil {
			return
		}
		again, err := decodeManifest(data, file, node)
		if err != nil || len(again) != len(pods) {
			t.Fatalf("a second decode gave %d pods, %v; the first %d", len(again), err, len(pods))
		}
		uids := map[string]string{}
		for i, p := range pods {
			switch {
			case p == nil:
				t.Fatalf("pod %d is nil", i)
			case !strings.HasSuffix(p.Name, "-"+node) || p.Name == "-"+node:
				t.Fatalf("pod %d name %q does not end in -%s", i, p.Name, node)
			case p.Namespace == "":
				t.Fatalf("pod %s has no namespace", p.Name)
			case p.UID == "" || p.Annotations[podutil.AnnotationConfigHash] != string(p.UID):
				t.Fatalf("pod %s: UID %q, config hash %q", p.Name, p.UID, p.Annotations[podutil.AnnotationConfigHash])
			case p.Annotations[podutil.AnnotationConfigSource] != podutil.SourceFile:
				t.Fatalf("pod %s: source %q", p.Name, p.Annotations[podutil.AnnotationConfigSource])
			case p.Spec.NodeName != node:
				t.Fatalf("pod %s: nodeName %q", p.Name, p.Spec.NodeName)
			case again[i].UID != p.UID:
				t.Fatalf("pod %s: UID %q, then %q", p.Name, p.UID, again[i].UID)
			}
			if err := validateStaticPod(p); err != nil {
				t.Fatalf("pod %s does not validate: %v", p.Name, err)
			}
			if other, dup := uids[string(p.UID)]; dup && other != fullName(p) {
				t.Fatalf("pods %s and %s share UID %s", other, fullName(p), p.UID)
			}
			uids[string(p.UID)] = fullName(p)
		}
	})
}
