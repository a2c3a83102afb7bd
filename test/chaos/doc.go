// Package chaos holds nodelet's fault suite (build tag chaos): each test runs nodelet on
// the real rig (kube-apiserver, containerd, runc) and injects one fault — nodelet killed
// or restarted mid-work, the runtime killed, the API server stopped, the root dir full,
// a slow runtime, corrupt state files, churn — then asserts what a user would check:
// nothing lost, nothing doubled, recovery within its bound. Counts are trimmed for CI;
// flags raise them (see each test). Run: `rig-chaos <repo> <regexp>` or hack/test-all.sh.
package chaos
