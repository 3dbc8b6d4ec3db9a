package main

// nodeplan's ProvisioningPlan (model/plan.py), camelCase JSON; Harness is extra (nodeplan ignores it).

// Plan is the output contract.
type Plan struct {
	Kind          string                   `json:"kind"`
	NodeClaims    []PlannedNodeClaim       `json:"nodeClaims"`
	ExistingNodes []ExistingNodeAssignment `json:"existingNodes"`
	Unschedulable []UnschedulablePod       `json:"unschedulable"`
	Cost          PlanCost                 `json:"cost"`
	Solver        SolverReport             `json:"solver"`
	Harness       Harness                  `json:"harness"`
}

type PlannedNodeClaim struct {
	Name         string            `json:"name"`
	NodePool     string            `json:"nodePool"`
	InstanceType string            `json:"instanceType"`
	Zone         string            `json:"zone"`
	CapacityType string            `json:"capacityType"`
	Price        float64           `json:"price"`
	Pods         []string          `json:"pods"`
	Labels       map[string]string `json:"labels"`
	Requests     map[string]string `json:"requests"`
	Allocatable  map[string]string `json:"allocatable"`
}

type ExistingNodeAssignment struct {
	Name string   `json:"name"`
	Pods []string `json:"pods"`
}

type UnschedulablePod struct {
	Pod    string `json:"pod"`
	Reason string `json:"reason"`
}

// PlanCost has no bound: Karpenter's scheduler computes none (lowerBound 0).
type PlanCost struct {
	Total      float64 `json:"total"`
	LowerBound float64 `json:"lowerBound"`
}

type SolverReport struct {
	Status           string             `json:"status"`
	WallSeconds      float64            `json:"wallSeconds"`
	TimeLimitSeconds float64            `json:"timeLimitSeconds"`
	BoundMethod      string             `json:"boundMethod"`
	Stages           map[string]float64 `json:"stages"`
	Notes            []string           `json:"notes"`
}

// Harness says what ran: the module version and Solve()'s own time (the benchmark's measure).
type Harness struct {
	Module       string  `json:"module"`
	Version      string  `json:"version"`
	SolveSeconds float64 `json:"solveSeconds"`
	Pods         int     `json:"pods"`
	TimedOut     bool    `json:"timedOut"`
}
