package podruntime

import (
	"context"
	"fmt"
	"math"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// nonRootPolicy is what a container's effective security context (the
// container's fields over the pod's) says about running as root.
func nonRootPolicy(pod *v1.Pod, c *v1.Container) (nonRoot bool, runAsUser *int64) {
	if psc := pod.Spec.SecurityContext; psc != nil {
		nonRoot = psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
		runAsUser = psc.RunAsUser
	}
	if csc := c.SecurityContext; csc != nil {
		if csc.RunAsNonRoot != nil {
			nonRoot = *csc.RunAsNonRoot
		}
		if csc.RunAsUser != nil {
			runAsUser = csc.RunAsUser
		}
	}
	return nonRoot, runAsUser
}

// imageUser is the user an image runs as, from CRI ImageStatus: a numeric
// uid, or else a user name. An image that names neither runs as root, so it
// is uid 0, as upstream treats it.
func imageUser(img *runtimeapi.Image) (uid *int64, username string) {
	if u := img.GetUid(); u != nil {
		v := u.GetValue()
		return &v, ""
	}
	if name := img.GetUsername(); name != "" {
		return nil, name
	}
	root := int64(0)
	return &root, ""
}

// formatPod names a pod in messages as upstream does: name_namespace(uid).
func formatPod(pod *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}

// verifyRunAsNonRoot refuses a container that must not run as root but would:
// runAsUser 0, an image running as uid 0 (or naming no user), or an image whose
// user is a name nodelet cannot check. uid and username are the image's user,
// asked only when runAsUser is unset. The messages are upstream's: users and
// tools match on them.
func verifyRunAsNonRoot(pod *v1.Pod, c *v1.Container, uid *int64, username string) error {
	nonRoot, runAsUser := nonRootPolicy(pod, c)
	if !nonRoot {
		return nil
	}
	if runAsUser != nil {
		if *runAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", formatPod(pod), c.Name)
		}
		return nil
	}
	switch {
	case uid == nil && username != "":
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", username, formatPod(pod), c.Name)
	case uid != nil && *uid == 0:
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", formatPod(pod), c.Name)
	case uid != nil:
		if errs := validation.IsValidUserID(*uid); len(errs) > 0 {
			return fmt.Errorf("container has runAsNonRoot and image has an invalid user id (%d). (Must be 1-(%d)): %s (pod: %q, container: %s)",
				*uid, math.MaxInt32, strings.Join(errs, "; "), formatPod(pod), c.Name)
		}
	}
	return nil
}

// imageUserOf asks the runtime which user the container's image runs as. As
// upstream, it is asked for every container start: the answer is both the
// runAsNonRoot check's and the security context's when runAsUser is unset.
func (m *Manager) imageUserOf(ctx context.Context, c *v1.Container, imageRef string) (imageUserInfo, error) {
	resp, err := m.deps.Images.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: imageRef, UserSpecifiedImage: c.Image}, false)
	if err != nil {
		return imageUserInfo{}, fmt.Errorf("reading the user of image %s: %w", c.Image, err)
	}
	uid, username := imageUser(resp.GetImage())
	return imageUserInfo{uid: uid, username: username}, nil
}
