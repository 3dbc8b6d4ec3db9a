package main

// The harness input: the Kubernetes objects of a nodeplan snapshot, which pods nodeplan counts as pending,
// and the instance catalog, in one JSON document (written by bench/realkarpenter.py).

import (
	"encoding/json"
	"fmt"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// Input is what bench/realkarpenter.py writes.
type Input struct {
	// Objects are Kubernetes objects exactly as `kubectl get -o json` shows them; kinds other than Pod,
	// Node, NodePool, DaemonSet and Namespace are ignored.
	Objects []json.RawMessage `json:"objects"`
	// Pending lists the "namespace/name" of every pod nodeplan would provision for: the same batch for both.
	Pending []string `json:"pending"`
	// InstanceTypes is the catalog in nodeplan's InstanceCatalog item shape (providers/catalog_file.py).
	InstanceTypes []CatalogType `json:"instanceTypes"`
}

// Cluster is the decoded input.
type Cluster struct {
	Pending    []*corev1.Pod
	Bound      []*corev1.Pod
	Nodes      []*corev1.Node
	NodePools  []*v1.NodePool
	DaemonSets []*appsv1.DaemonSet
	Namespaces []*corev1.Namespace
	Catalog    []CatalogType
}

type objectHeader struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// ReadInput decodes the input file; errors name the object (by position, kind and name) that failed.
func ReadInput(path string) (*Cluster, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var in Input
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	pending := map[string]bool{}
	for _, key := range in.Pending {
		pending[key] = true
	}
	out := &Cluster{Catalog: in.InstanceTypes}
	for i, raw := range in.Objects {
		var head objectHeader
		if err := json.Unmarshal(raw, &head); err != nil {
			return nil, fmt.Errorf("%s: objects[%d]: %w", path, i, err)
		}
		where := fmt.Sprintf("%s: objects[%d] (%s %s)", path, i, head.Kind, head.Metadata.Name)
		decode := func(into any) error {
			if err := json.Unmarshal(raw, into); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			return nil
		}
		switch head.Kind {
		case "Pod":
			pod := &corev1.Pod{}
			if err := decode(pod); err != nil {
				return nil, err
			}
			if pod.Namespace == "" {
				pod.Namespace = "default"
			}
			if pod.UID == "" { // the scheduler keys its per-pod cache by UID
				pod.UID = types.UID(pod.Namespace + "/" + pod.Name)
			}
			switch {
			case pending[pod.Namespace+"/"+pod.Name]:
				pod.Spec.NodeName = ""
				out.Pending = append(out.Pending, pod)
			case pod.Spec.NodeName != "":
				out.Bound = append(out.Bound, pod)
			}
		case "Node":
			node := &corev1.Node{}
			if err := decode(node); err != nil {
				return nil, err
			}
			out.Nodes = append(out.Nodes, node)
		case "NodePool":
			np := &v1.NodePool{}
			if err := decode(np); err != nil {
				return nil, err
			}
			if np.Spec.Template.Spec.NodeClassRef == nil { // the scheduler labels claims with the node class
				np.Spec.Template.Spec.NodeClassRef = &v1.NodeClassReference{Group: "karpenter.test.sh", Kind: "TestNodeClass", Name: "default"}
			}
			out.NodePools = append(out.NodePools, np)
		case "DaemonSet":
			ds := &appsv1.DaemonSet{}
			if err := decode(ds); err != nil {
				return nil, err
			}
			if ds.Namespace == "" {
				ds.Namespace = "default"
			}
			out.DaemonSets = append(out.DaemonSets, ds)
		case "Namespace":
			ns := &corev1.Namespace{}
			if err := decode(ns); err != nil {
				return nil, err
			}
			out.Namespaces = append(out.Namespaces, ns)
		}
	}
	if len(out.NodePools) == 0 {
		return nil, fmt.Errorf("%s: no NodePool among the objects", path)
	}
	if len(out.Catalog) == 0 {
		return nil, fmt.Errorf("%s: instanceTypes is empty", path)
	}
	return out, nil
}
