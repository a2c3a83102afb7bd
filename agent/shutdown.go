package agent

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/nodeshutdown"
	"github.com/nodelet/nodelet/syncloop"
)

// Environment variables for the shutdown wiring. The system bus address follows the
// D-Bus convention; the drop-in path is configurable so tests need not touch /etc.
const (
	envSystemBus    = "DBUS_SYSTEM_BUS_ADDRESS"
	envLogindDropIn = "NODELET_LOGIND_DROPIN"
)

// gracefulShutdown is the graceful node shutdown feature, when enabled.
type gracefulShutdown struct {
	mgr   *nodeshutdown.Manager
	inh   *nodeshutdown.Inhibitor
	check nodeshutdown.DelayCheck
	err   error // from checking logind's delay, if it failed
}

// setUpShutdown enables graceful node shutdown when the config asks for it. No bus
// or no logind is a loud warning, not a failure: the rest of nodelet runs.
func setUpShutdown(ctx context.Context, kc *kubeletconfigv1beta1.KubeletConfiguration, rootDir string, loop *syncloop.Loop, clk clock.Clock, reg prometheus.Registerer) (*gracefulShutdown, error) {
	logger := klog.FromContext(ctx)
	groups, err := nodeshutdown.Groups(kc)
	if err != nil {
		return nil, fmt.Errorf("graceful node shutdown config: %w", err)
	}
	if len(groups) == 0 {
		return nil, nil
	}
	inh, err := nodeshutdown.NewInhibitor(nodeshutdown.InhibitorOptions{
		BusAddress: os.Getenv(envSystemBus), DropInPath: os.Getenv(envLogindDropIn), Clock: clk, Registerer: reg,
	})
	if err != nil {
		logger.Error(err, "Graceful node shutdown is OFF: cannot reach logind over the system D-Bus; pods will be killed abruptly at shutdown")
		return nil, nil
	}
	total := nodeshutdown.TotalGrace(groups)
	check, err := inh.EnsureInhibitDelay(ctx, total)
	switch {
	case err != nil:
		logger.Error(err, "Graceful node shutdown: could not check or raise logind's InhibitDelayMaxSec", "wanted", total)
	case !check.OK():
		logger.Error(nil, "Graceful node shutdown: logind will not wait long enough for pods to stop",
			"wantedInhibitDelay", check.Wanted, "inhibitDelayBefore", check.Before, "inhibitDelayAfter", check.After,
			"dropIn", check.DropInPath, "overriddenBy", check.Overrides)
	default:
		logger.Info("Graceful node shutdown enabled", "groups", len(groups), "totalGrace", total, "inhibitDelayMax", check.After, "wroteDropIn", check.WroteDropIn)
	}
	mgr, err := nodeshutdown.NewManager(nodeshutdown.Options{
		Groups: groups, Killer: loop, Lister: loop.ActivePods, RootDir: rootDir, Clock: clk, Registerer: reg,
	})
	if err != nil {
		_ = inh.Close()
		return nil, fmt.Errorf("setting up graceful node shutdown: %w", err)
	}
	return &gracefulShutdown{mgr: mgr, inh: inh, check: check, err: err}, nil
}

// healthDetails says, in /healthz?verbose, whether logind gives the shutdown its time.
func (g *gracefulShutdown) healthDetails() []string {
	if g == nil {
		return nil
	}
	lock := "held"
	if !g.inh.Held() {
		lock = "NOT held"
	}
	switch {
	case g.err != nil:
		return []string{fmt.Sprintf("[!]graceful shutdown: could not read logind's InhibitDelayMaxSec (%v); inhibitor lock %s", g.err, lock)}
	case !g.check.OK():
		return []string{fmt.Sprintf("[!]graceful shutdown: logind InhibitDelayMaxSec %s is below the needed %s; inhibitor lock %s", g.check.After, g.check.Wanted, lock)}
	default:
		return []string{fmt.Sprintf("[+]graceful shutdown: logind InhibitDelayMaxSec %s covers the needed %s; inhibitor lock %s", g.check.After, g.check.Wanted, lock)}
	}
}

// shutdownState is whether a node shutdown is under way, as the shutdown manager's
// Run reports it. Readiness and admission read it; it exists before them and before
// the shutdown manager, which needs the sync loop. Without the feature it stays off.
type shutdownState struct{ on atomic.Bool }

func (s *shutdownState) set(on bool) { s.on.Store(on) }

func (s *shutdownState) admit(*v1.Pod) *syncloop.Rejection {
	if s.on.Load() {
		return &syncloop.Rejection{Reason: nodeshutdown.AdmitRejectReason, Message: nodeshutdown.AdmitRejectMessage}
	}
	return nil
}

func (s *shutdownState) notReady() []string {
	if s.on.Load() {
		return []string{nodeshutdown.NodeNotReadyMessage}
	}
	return nil
}

// PrintShutdownPlan implements `nodelet shutdown plan`: the groups, the pods in each,
// their grace, the total and whether logind allows it, for the running node.
func PrintShutdownPlan(ctx context.Context, w io.Writer, opts *config.Options) error {
	groups, err := nodeshutdown.Groups(opts.Config)
	if err != nil {
		return fmt.Errorf("graceful node shutdown config: %w", err)
	}
	var pods []*v1.Pod
	if opts.Kubeconfig != "" {
		nodeName, err := config.NodeName(opts.HostnameOverride)
		if err != nil {
			return err
		}
		client, _, err := newClients(opts.Kubeconfig, config.Resolve(opts.Config).APIClient)
		if err != nil {
			return err
		}
		pods, err = nodePods(ctx, client, nodeName)
		if err != nil {
			return err
		}
	} else {
		fmt.Fprintln(w, "(no --kubeconfig: showing groups only)")
	}
	var logindMax time.Duration
	known := false
	if len(groups) > 0 {
		if inh, err := nodeshutdown.NewInhibitor(nodeshutdown.InhibitorOptions{BusAddress: os.Getenv(envSystemBus)}); err == nil {
			if d, err := inh.InhibitDelayMax(ctx); err == nil {
				logindMax, known = d, true
			}
			_ = inh.Close()
		}
	}
	return nodeshutdown.FormatPlan(w, nodeshutdown.Plan(groups, pods), logindMax, known)
}

func nodePods(ctx context.Context, client kubernetes.Interface, nodeName string) ([]*v1.Pod, error) {
	list, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeName).String()})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", nodeName, err)
	}
	var out []*v1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if podutil.IsTerminal(p.Status.Phase) {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// recordShutdown records upstream's Normal "Shutdown" event on the node when
// logind announces a shutdown, and when it cancels one. (Upstream's Go constant
// is NodeShutdown, its reason "Shutdown"; the admission rejection's reason is
// NodeShutdown.)
func recordShutdown(rec record.EventRecorder, nodeName string, shuttingDown bool) {
	msg := "Shutdown manager detected shutdown cancellation"
	if shuttingDown {
		msg = "Shutdown manager detected shutdown event"
	}
	rec.Event(&v1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)}, v1.EventTypeNormal, "Shutdown", msg)
}
