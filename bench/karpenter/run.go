package main

// One provisioning decision by the real scheduler, set up as scheduling_benchmark_test.go's setupScheduler
// and benchmarkScheduler do, with the snapshot's NodePools (ordered by weight, as the provisioner orders
// them), DaemonSets (as the provisioner turns them into pods) and existing nodes (in the state cluster).

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakecr "sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	"sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/test"
	"sigs.k8s.io/karpenter/pkg/utils/daemonset"
	nodepoolutils "sigs.k8s.io/karpenter/pkg/utils/nodepool"
)

// Run solves the batch and launches every NodeClaim through the fake provider.
func Run(ctx context.Context, c *Cluster, timeout time.Duration) (*Plan, error) {
	setupStarted := time.Now()
	ctx = options.ToContext(injection.WithControllerName(ctx, "provisioner"), test.Options())
	instanceTypes, err := InstanceTypes(c.Catalog)
	if err != nil {
		return nil, inputError{err}
	}
	cloudProvider := fake.NewCloudProvider()
	cloudProvider.InstanceTypes = instanceTypes

	kubeClient := fakecr.NewClientBuilder().
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string {
			return []string{o.(*corev1.Pod).Spec.NodeName}
		}).
		WithObjects(objects(c)...).
		Build()
	clk := &clock.RealClock{}
	cluster := state.NewCluster(clk, kubeClient, cloudProvider)
	for _, node := range c.Nodes {
		if err := cluster.UpdateNode(ctx, node.DeepCopy()); err != nil {
			return nil, inputError{fmt.Errorf("node %s: %w", node.Name, err)}
		}
	}
	for _, pod := range c.Bound {
		if err := cluster.UpdatePod(ctx, pod.DeepCopy()); err != nil {
			return nil, inputError{fmt.Errorf("pod %s/%s on node %s: %w", pod.Namespace, pod.Name, pod.Spec.NodeName, err)}
		}
	}
	stateNodes := cluster.DeepCopyNodes().Active()

	nodePools := c.NodePools
	nodepoolutils.OrderByWeight(nodePools)
	byPool := map[string][]*cloudprovider.InstanceType{}
	for _, np := range nodePools {
		byPool[np.Name] = instanceTypes
	}
	opts := []scheduling.Options{scheduling.NumConcurrentReconciles(5)} // the benchmark's
	pods := c.Pending
	topology, err := scheduling.NewTopology(ctx, kubeClient, cluster, stateNodes, nodePools, byPool, pods, opts...)
	if err != nil {
		return nil, fmt.Errorf("creating topology, %w", err)
	}
	scheduler := scheduling.NewScheduler(ctx, kubeClient, nodePools, cluster, stateNodes, topology, byPool,
		daemonSetPods(c), events.NewRecorder(&record.FakeRecorder{}), clk, nil, nil, opts...)
	setup := since(setupStarted)

	solveCtx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		solveCtx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	solveStarted := time.Now()
	results, err := scheduler.Solve(solveCtx, pods)
	solve := since(solveStarted)
	timedOut := errors.Is(err, context.DeadlineExceeded)
	if err != nil && !timedOut {
		return nil, fmt.Errorf("solving, %w", err)
	}

	launchStarted := time.Now()
	// as the provisioner does between Solve and launch (minValues pods fail here)
	results = results.TruncateInstanceTypes(ctx, scheduling.MaxInstanceTypes)
	prices := priceIndex(c.Catalog)
	plan := &Plan{Kind: "ProvisioningPlan", NodeClaims: []PlannedNodeClaim{}, ExistingNodes: []ExistingNodeAssignment{},
		Unschedulable: []UnschedulablePod{}}
	for i, n := range results.NewNodeClaims {
		claim := n.ToNodeClaim()
		claim.Name = fmt.Sprintf("%s-%05d", n.NodePoolName, i)
		created, err := cloudProvider.Create(ctx, claim)
		if err != nil {
			return nil, fmt.Errorf("launching nodeclaim %s, %w", claim.Name, err)
		}
		planned := planned(created, n.NodePoolName, n.Pods, prices)
		if planned.Price < 0 {
			return nil, fmt.Errorf("launched %s in %s/%s, which the catalog does not price", planned.InstanceType, planned.Zone, planned.CapacityType)
		}
		plan.NodeClaims = append(plan.NodeClaims, planned)
		plan.Cost.Total += planned.Price
	}
	for _, e := range results.ExistingNodes {
		if len(e.Pods) == 0 {
			continue
		}
		plan.ExistingNodes = append(plan.ExistingNodes, ExistingNodeAssignment{Name: e.Name(), Pods: keys(e.Pods)})
	}
	for pod, err := range results.PodErrors {
		plan.Unschedulable = append(plan.Unschedulable, UnschedulablePod{Pod: pod.Namespace + "/" + pod.Name, Reason: err.Error()})
	}
	if timedOut { // pods Solve never reached are as unplaced as the ones it gave up on
		placed := map[string]bool{}
		for _, n := range plan.NodeClaims {
			for _, p := range n.Pods {
				placed[p] = true
			}
		}
		for _, e := range plan.ExistingNodes {
			for _, p := range e.Pods {
				placed[p] = true
			}
		}
		for _, u := range plan.Unschedulable {
			placed[u.Pod] = true
		}
		for _, p := range pods {
			if key := p.Namespace + "/" + p.Name; !placed[key] {
				plan.Unschedulable = append(plan.Unschedulable, UnschedulablePod{Pod: key, Reason: "scheduling simulation timed out"})
			}
		}
	}
	sort.Slice(plan.Unschedulable, func(i, j int) bool { return plan.Unschedulable[i].Pod < plan.Unschedulable[j].Pod })
	launch := since(launchStarted)

	status := "GREEDY" // first-fit-decreasing: Karpenter proves nothing about its plan
	if len(pods) == 0 {
		status = "EMPTY"
	}
	version := karpenterVersion()
	notes := []string{fmt.Sprintf("%s %s scheduling.Solve, fake cloud provider launch", module, version),
		"no lower bound: Karpenter's scheduler computes none"}
	if timedOut {
		notes = append(notes, fmt.Sprintf("Solve timed out after %s", timeout))
	}
	plan.Solver = SolverReport{Status: status, WallSeconds: round(setup + solve + launch),
		TimeLimitSeconds: timeout.Seconds(), BoundMethod: "none",
		Stages: map[string]float64{"setup": round(setup), "solve": round(solve), "launch": round(launch)}, Notes: notes}
	plan.Cost.Total = round(plan.Cost.Total)
	plan.Harness = Harness{Module: module, Version: version, SolveSeconds: round(solve), Pods: len(pods),
		TimedOut: timedOut}
	return plan, nil
}

// objects are what the fake API server holds: nodes, the pods bound to them and namespaces (topology counts
// bound pods through the client; pending pods are the batch and never counted).
func objects(c *Cluster) []client.Object {
	var out []client.Object
	for _, n := range c.Nodes {
		out = append(out, n.DeepCopy())
	}
	for _, p := range c.Bound {
		out = append(out, p.DeepCopy())
	}
	for _, ns := range c.Namespaces {
		out = append(out, ns.DeepCopy())
	}
	return out
}

// daemonSetPods are the DaemonSets' pods as the provisioner builds them (getDaemonSetPods): the template
// with limits merged into requests, and the template's required node affinity kept.
func daemonSetPods(c *Cluster) []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(c.DaemonSets))
	for _, ds := range c.DaemonSets {
		pod := daemonset.PodForDaemonSet(ds)
		if a := ds.Spec.Template.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			if pod.Spec.Affinity == nil {
				pod.Spec.Affinity = &corev1.Affinity{}
			}
			if pod.Spec.Affinity.NodeAffinity == nil {
				pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
			}
			pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		}
		out = append(out, pod)
	}
	return out
}

type offeringKey struct{ instanceType, zone, capacityType string }

func priceIndex(catalog []CatalogType) map[offeringKey]float64 {
	out := map[offeringKey]float64{}
	for _, it := range catalog {
		for _, o := range it.Offerings {
			out[offeringKey{it.Name, o.Zone, o.CapacityType}] = o.Price
		}
	}
	return out
}

// planned is one launched NodeClaim in the plan's shape: what the fake provider launched (its labels name
// the instance type, zone and capacity type) and the pods the scheduler put there.
func planned(created *v1.NodeClaim, pool string, pods []*corev1.Pod, prices map[offeringKey]float64) PlannedNodeClaim {
	labels := map[string]string{}
	for k, v := range created.Labels {
		if k != corev1.LabelHostname {
			labels[k] = v
		}
	}
	it, zone, ct := labels[corev1.LabelInstanceTypeStable], labels[corev1.LabelTopologyZone], labels[v1.CapacityTypeLabelKey]
	price, ok := prices[offeringKey{it, zone, ct}]
	if !ok {
		price = -1
	}
	return PlannedNodeClaim{Name: created.Name, NodePool: pool, InstanceType: it, Zone: zone, CapacityType: ct,
		Price: price, Pods: keys(pods), Labels: labels, Requests: quantities(created.Spec.Resources.Requests),
		Allocatable: quantities(created.Status.Allocatable)}
}

func keys(pods []*corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	sort.Strings(out)
	return out
}

func quantities(r corev1.ResourceList) map[string]string {
	out := map[string]string{}
	for k, v := range r {
		out[string(k)] = v.String()
	}
	return out
}

func round(x float64) float64 { return float64(int64(x*1e6+0.5)) / 1e6 }
