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
// # Wiring
//
// New takes Config, the node-wide settings as plain values resolved by the
// caller, and Deps, the collaborators (the CRI runtime and image services,
// volumes, the node's facts, the optional managers), as syncloop does.
package podruntime
