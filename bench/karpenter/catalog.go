package main

// nodeplan's instance catalog as Karpenter cloud-provider instance types, built the way the fake cloud
// provider builds its own (pkg/cloudprovider/fake NewInstanceType): one In requirement per label, zone and
// capacity type from the available offerings, kubeReserved/systemReserved/evictionThreshold as overhead,
// every label key registered as well known.

import (
	"fmt"
	"os"
	"sort"

	corev1 "k8s.io/api/core/v1"

	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"
)

// CatalogType is one item of nodeplan's InstanceCatalog (providers/catalog_file.py).
type CatalogType struct {
	Name     string              `json:"name"`
	Labels   map[string]string   `json:"labels"`
	Capacity corev1.ResourceList `json:"capacity"`
	Overhead struct {
		KubeReserved      corev1.ResourceList `json:"kubeReserved"`
		SystemReserved    corev1.ResourceList `json:"systemReserved"`
		EvictionThreshold corev1.ResourceList `json:"evictionThreshold"`
	} `json:"overhead"`
	Offerings []CatalogOffering `json:"offerings"`
}

// CatalogOffering is one (zone, capacity type) at an hourly price.
type CatalogOffering struct {
	Zone         string  `json:"zone"`
	CapacityType string  `json:"capacityType"`
	Price        float64 `json:"price"`
	Available    *bool   `json:"available"`
}

func (o CatalogOffering) available() bool { return o.Available == nil || *o.Available }

// InstanceTypes converts the catalog. Offerings are ordered cheapest first: fake.CloudProvider.Create picks
// the cheapest type by its cheapest compatible offering and then launches the first compatible offering, so
// this order makes that launch the cheapest compatible offering, as every real provider's is. Reserved
// offerings are left out (the catalog has no reservation capacity to give them).
func InstanceTypes(catalog []CatalogType) ([]*cloudprovider.InstanceType, error) {
	out := make([]*cloudprovider.InstanceType, 0, len(catalog))
	skipped := 0
	for i, item := range catalog {
		if item.Name == "" {
			return nil, fmt.Errorf("instanceTypes[%d]: name is required", i)
		}
		offerings := make([]CatalogOffering, 0, len(item.Offerings))
		for _, o := range item.Offerings {
			if o.CapacityType == v1.CapacityTypeReserved {
				skipped++
				continue
			}
			offerings = append(offerings, o)
		}
		sort.SliceStable(offerings, func(a, b int) bool { return offerings[a].Price < offerings[b].Price })
		var cpOfferings cloudprovider.Offerings
		zones, capacityTypes := []string{}, []string{}
		for _, o := range offerings {
			cpOfferings = append(cpOfferings, &cloudprovider.Offering{
				Requirements: scheduling.NewLabelRequirements(map[string]string{
					v1.CapacityTypeLabelKey:  o.CapacityType,
					corev1.LabelTopologyZone: o.Zone,
				}),
				Price:     o.Price,
				Available: o.available(),
			})
			if o.available() {
				zones = append(zones, o.Zone)
				capacityTypes = append(capacityTypes, o.CapacityType)
			}
		}
		requirements := scheduling.NewRequirements(
			scheduling.NewRequirement(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, item.Name),
			scheduling.NewRequirement(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, zones...),
			scheduling.NewRequirement(v1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, capacityTypes...),
		)
		for key, value := range item.Labels {
			// a provider registers its instance labels as well known (the KWOK provider does so for
			// karpenter.kwok.sh/*, the fake one for size/special/integer): pods may select them, and a
			// NodeClaim need not name them to launch
			v1.WellKnownLabels.Insert(key)
			if key == corev1.LabelInstanceTypeStable || key == corev1.LabelTopologyZone || key == v1.CapacityTypeLabelKey {
				continue
			}
			requirements.Add(scheduling.NewRequirement(key, corev1.NodeSelectorOpIn, value))
		}
		capacity := corev1.ResourceList{}
		for k, v := range item.Capacity {
			capacity[k] = v.DeepCopy()
		}
		out = append(out, &cloudprovider.InstanceType{
			Name:         item.Name,
			Requirements: requirements,
			Offerings:    cpOfferings,
			Capacity:     capacity,
			Overhead: &cloudprovider.InstanceTypeOverhead{
				KubeReserved:      orEmpty(item.Overhead.KubeReserved),
				SystemReserved:    orEmpty(item.Overhead.SystemReserved),
				EvictionThreshold: orEmpty(item.Overhead.EvictionThreshold),
			},
		})
	}
	if skipped > 0 {
		fmt.Fprintf(os.Stderr, "karpenter-harness: left out %d reserved offering(s)\n", skipped)
	}
	return out, nil
}

func orEmpty(r corev1.ResourceList) corev1.ResourceList {
	if r == nil {
		return corev1.ResourceList{}
	}
	return r
}
