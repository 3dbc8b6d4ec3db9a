// Command karpenter-harness runs the real Karpenter provisioning scheduler (sigs.k8s.io/karpenter's
// scheduling.NewScheduler(...).Solve) on a nodeplan snapshot and catalog, set up exactly as Karpenter's own
// scheduling benchmark (pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go) sets it up:
// the fake cloud provider holding the catalog's instance types, a state cluster over a fake client, the
// topology, NumConcurrentReconciles(5). Each resulting NodeClaim is then launched through the fake
// provider's own Create (the cheapest compatible offering), and the outcome is written as a nodeplan
// ProvisioningPlan (model/plan.py).
//
// Usage: karpenter-harness -in input.json [-o plan.json] [-timeout 0]
//
//	karpenter-harness -version
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/karpenter/pkg/operator/logging"
)

const module = "sigs.k8s.io/karpenter"

func karpenterVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == module {
				return dep.Version
			}
		}
	}
	return "unknown"
}

func main() {
	in := flag.String("in", "", "harness input JSON (bench/realkarpenter.py writes it)")
	out := flag.String("o", "-", "where to write the ProvisioningPlan JSON ('-': stdout)")
	timeout := flag.Duration("timeout", 0, "bound Solve() like the provisioner's 1m (0: none, as the benchmark)")
	version := flag.Bool("version", false, "print the Karpenter module version and exit")
	flag.Parse()
	if *version {
		fmt.Printf("karpenter-harness %s %s\n", module, karpenterVersion())
		return
	}
	if *in == "" {
		fmt.Fprintln(os.Stderr, "usage: karpenter-harness -in input.json [-o plan.json] [-timeout 0]")
		os.Exit(2)
	}
	log.SetLogger(logging.NopLogger) // as the benchmark does
	cluster, err := ReadInput(*in)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(2)
	}
	plan, err := Run(context.Background(), cluster, *timeout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		code := 1
		if errors.As(err, new(inputError)) {
			code = 2
		}
		os.Exit(code)
	}
	var w io.Writer = os.Stdout
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintf(os.Stderr, "error: %v\n", err)
			os.Exit(1)
		}
		defer f.Close()
		w = f
	}
	enc := json.NewEncoder(w)
	if err := enc.Encode(plan); err != nil {
		fmt.Fprintf(os.Stderr, "error: writing the plan: %v\n", err)
		os.Exit(1)
	}
}

// inputError is bad input (exit 2), as opposed to a failure of the run itself.
type inputError struct{ error }

func since(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1e6 }
