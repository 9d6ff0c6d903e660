// leasecandidate is a real Kubernetes leader-election candidate: client-go's
// tools/leaderelection with a resourcelock.LeaseLock, as kube-controller-manager,
// kube-scheduler and controller-runtime use it, so tests can drive true
// coordination.k8s.io/v1 Lease writes through a real kube-apiserver.
//
// Build (module mode, client-go pinned in go.mod; go.sum is committed):
//
//	go build -mod=readonly -trimpath -o leasecandidate .
//
// Run:
//
//	leasecandidate --kubeconfig FILE --namespace NS --name LEASE --id ME \
//	  [--lease-duration 15s] [--renew-deadline 10s] [--retry-period 2s] [--release-on-cancel]
//
// It prints one line per event on stdout, each prefixed by the wall-clock time
// in unix microseconds:
//
//	T ready                   the client is built; the election starts
//	T new-leader ME OTHER     client-go observed a leader (OTHER may be ME)
//	T started-leading ME      this candidate acquired the Lease
//	T stopped-leading ME      it stopped leading (printed only after started-leading;
//	                          client-go also calls the callback for a never-leader)
//	T exited                  just before the process exits
//
// On SIGTERM or SIGINT it cancels its context (with --release-on-cancel
// client-go then writes holderIdentity "" and leaseDurationSeconds 1) and exits
// 0. If it stops leading on its own (a renew deadline missed), it exits 1 after
// "exited", as most Kubernetes components do. client-go's logs go to stderr.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

var outMu sync.Mutex

// say prints one event line, prefixed by the unix time in microseconds.
func say(format string, args ...any) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Printf("%d %s\n", time.Now().UnixMicro(), fmt.Sprintf(format, args...))
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (required)")
	namespace := flag.String("namespace", "default", "the Lease's namespace")
	name := flag.String("name", "", "the Lease's name (required)")
	id := flag.String("id", "", "this candidate's holder identity (required)")
	leaseDuration := flag.Duration("lease-duration", 15*time.Second, "LeaseDuration")
	renewDeadline := flag.Duration("renew-deadline", 10*time.Second, "RenewDeadline")
	retryPeriod := flag.Duration("retry-period", 2*time.Second, "RetryPeriod")
	releaseOnCancel := flag.Bool("release-on-cancel", false, "ReleaseOnCancel: give the Lease up on SIGTERM")
	flag.Parse()
	if *kubeconfig == "" || *name == "" || *id == "" {
		fmt.Fprintln(os.Stderr, "leasecandidate: --kubeconfig, --name and --id are required")
		os.Exit(2)
	}

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasecandidate:", err)
		os.Exit(2)
	}
	// As resourcelock.NewFromKubeconfig does: one hung request must not outlast
	// the renew deadline.
	config.Timeout = max(time.Second, *renewDeadline/2)
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasecandidate:", err)
		os.Exit(2)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: *namespace, Name: *name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: *id},
	}

	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	var signalled atomic.Bool
	go func() {
		<-signals
		signalled.Store(true)
		cancel()
	}()

	var leading atomic.Bool
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   *leaseDuration,
		RenewDeadline:   *renewDeadline,
		RetryPeriod:     *retryPeriod,
		ReleaseOnCancel: *releaseOnCancel,
		Name:            *name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				leading.Store(true)
				say("started-leading %s", *id)
			},
			OnStoppedLeading: func() {
				if leading.Swap(false) {
					say("stopped-leading %s", *id)
				}
			},
			OnNewLeader: func(identity string) { say("new-leader %s %s", *id, identity) },
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasecandidate:", err)
		os.Exit(2)
	}
	say("ready")
	elector.Run(ctx) // returns on cancel (after the release) or when leadership is lost
	say("exited")
	if !signalled.Load() {
		os.Exit(1)
	}
}
