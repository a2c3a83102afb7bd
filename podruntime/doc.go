// Package podruntime drives the container runtime toward a pod's spec over CRI.
//
// # Decide(facts) → plan, executed by a thin runner
//
// The house rule for decisions: a pure function takes plain values (the facts
// gathered first) and returns a plan; a runner carries the plan out and holds
// no decision of its own. Here:
//
//   - gatherFacts reads what a sync decides from into Facts: the pod, its
//     runtime status (pleg.PodStatus), the crash-loop back-off of its exited
//     containers, the prober's verdicts on its running ones, and the resources
//     the runtime was told of each container (in-place resize).
//   - ComputeActions(Facts) → Actions is the decision: kill the pod or
//     containers (and why, with which grace), create a sandbox (with which
//     attempt), which init, app and ephemeral containers to start, which wait
//     in their back-off, and the in-place resize (ResizePlan). It calls nothing
//     out; its table tests (actions_test.go, after upstream's
//     TestComputePodActions*) need no runtime.
//   - SyncPod is the runner, in named steps over one podSync: checkNetwork,
//     plan (gather and decide), reportBackOffs, killForPlan, setUpVolumes,
//     resizeForPlan, ensureSandbox (createSandbox), the hosts file, and
//     startForPlan (startContainer for each container of the plan).
//
// Smaller decisions follow the same shape: nextInstance (a container's next
// attempt and restart count), resizeSteps and memoryDecreases (the order of a
// resize and what it must check), invalidImageName.
//
// # Starting a container
//
// startContainer ensures the image, then prepareContainer builds the CRI
// config (the image's user and runAsNonRoot, the next instance's numbers,
// env, mounts, devices, security context, allocated devices) and
// runContainer creates and starts it and runs its postStart hook. Every
// failure to configure it is one typed error (configError), handled once
// (configFailed): the container waits with CreateContainerConfigError and a
// Failed event, as upstream.
//
// # What the runtime is told
//
// CRI labels and annotations are upstream's (cri/labels.go), so either agent
// reads the other's restart counts, grace periods and preStop hooks. A running
// container is restarted when its io.kubernetes.container.hash, whichever
// agent wrote it, is not the upstream kubelet's hash of its name and image
// (hash.go).
//
// The sandbox gets the runtime handler of the pod's RuntimeClass (a missing
// class fails it with FailedCreatePodSandBox) and, for hostUsers: false, its
// ID mapping from package userns. security.go maps security contexts as
// upstream: seccomp with seccompDefault and Localhost profiles under
// <root>/seccomp, AppArmor, SELinux, capabilities, supplemental groups and
// their policy, the image's user for an unset runAsUser. Ephemeral containers
// are started once and never restarted; targetContainerName becomes the CRI
// pid namespace TARGET. Image volumes are pulled like container images and
// mounted read-only through CRI Mount.image.
//
// # Bursts and cut-off starts
//
// At most Config.MaxRuntimeStarts (the agent sets 10 per CPU) RunPodSandbox
// calls and CreateContainer→StartContainer runs go on at once (startslots.go):
// a burst is started in turns, not all at once. A container left created and
// never started (nodelet killed between CreateContainer and StartContainer) is
// removed before its replacement, which reuses its attempt number; when
// containerd refuses that removal because the killed nodelet's StartContainer
// is still in flight ("in starting state"), the sync is queued again in 1 s
// and creates nothing meanwhile.
//
// # Wiring
//
// New takes Config, the node-wide settings as plain values resolved by the
// caller, and Deps, the collaborators (the CRI runtime and image services,
// volumes, the node's facts, the optional managers), as syncloop does.
package podruntime
