// Command nodelet is a Kubernetes node agent: a reimplementation of the
// kubelet.
//
// The main is thin: flags → config.Load → agent.Run. `nodelet shutdown plan`
// prints the graceful node shutdown plan (which pods stop in which priority
// group, with which grace) without running the agent. The binary must not link
// test support (deps_test.go checks).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/agent"
	"github.com/nodelet/nodelet/config"
	nodeletversion "github.com/nodelet/nodelet/internal/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is nodelet's command line: it returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	// `nodelet shutdown plan [flags]` prints what a node shutdown would do, with the
	// same flags and config files as the daemon.
	plan := len(args) >= 2 && args[0] == "shutdown" && args[1] == "plan"
	if plan {
		args = args[2:]
	}
	opts, err := config.Load(args)
	if errors.Is(err, pflag.ErrHelp) {
		// --help / -h: the usage on stdout and success, as the kubelet (cobra) does.
		fmt.Fprint(stdout, config.Usage())
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "nodelet: %v\n", err)
		return 1
	}
	if opts.ShowVersion {
		printVersion(stdout, opts.VersionRaw)
		return 0
	}
	// Logging first, as the kubelet: the format, verbosity and vmodule apply to every
	// line after this one, for the daemon and for `shutdown plan` alike.
	if err := config.ApplyLogging(opts.Config, nil); err != nil {
		fmt.Fprintf(stderr, "nodelet: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if plan {
		if err := agent.PrintShutdownPlan(ctx, stdout, opts); err != nil {
			fmt.Fprintf(stderr, "nodelet shutdown plan: %v\n", err)
			return 1
		}
		return 0
	}
	defer klog.Flush()
	if err := agent.Run(ctx, opts); err != nil {
		klog.ErrorS(err, "nodelet stopped with an error")
		return 1
	}
	return 0
}

// printVersion prints what `kubelet --version` does ("Kubernetes vX.Y.Z"),
// or with --version=raw the whole version record, in component-base's
// verflag formats. verflag itself is not used: it prints to os.Stdout and
// exits, and its flag value is package-global, shared by every Load.
func printVersion(w io.Writer, raw bool) {
	info := nodeletversion.Get()
	if raw {
		fmt.Fprintf(w, "%#v\n", info)
		return
	}
	fmt.Fprintf(w, "Kubernetes %s\n", info)
}
