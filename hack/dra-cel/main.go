// Command dra-cel evaluates DRA CEL device selectors with k8s.io/dynamic-resource-allocation/cel, the
// package (and the call sequence) the kube-scheduler's structured allocator uses. It is the oracle of
// nodeplan's differential test for model/dracel.py.
//
// Input: JSON lines on stdin, one case per line:
//
//	{"expression": "...", "driver": "...", "attributes": {"model": {"string": "H100"}},
//	 "capacity": {"memory": {"value": "80Gi"}}, "allowMultipleAllocations": false}
//
// Output: one JSON line per input line, in order, exactly one of
//
//	{"result": true|false, "cost": <actual runtime cost>, "maxCost": <estimated worst case>}
//	{"compileError": "..."}
//	{"error": "...", "maxCost": <estimated worst case>}
//	{"inputError": "..."}  (the line is not a valid case)
//
// "maxCost" is the worst-case cost the apiserver estimates when it validates a selector (objects whose
// estimate exceeds resourceapi.CELSelectorExpressionMaxCost are rejected at admission).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"
)

// features are the kube-scheduler 1.36 defaults: DRAConsumableCapacity is beta and on (so
// device.allowMultipleAllocations exists), DRAListTypeAttributes is alpha and off.
var features = dracel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: false}

type selectorCase struct {
	Expression               string                                                   `json:"expression"`
	Driver                   string                                                   `json:"driver"`
	Attributes               map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes"`
	Capacity                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity  `json:"capacity"`
	AllowMultipleAllocations *bool                                                    `json:"allowMultipleAllocations"`
}

type outcome struct {
	Result       *bool   `json:"result,omitempty"`
	Cost         *uint64 `json:"cost,omitempty"`
	MaxCost      *uint64 `json:"maxCost,omitempty"`
	CompileError string  `json:"compileError,omitempty"`
	Error        string  `json:"error,omitempty"`
	InputError   string  `json:"inputError,omitempty"`
}

func evaluate(cache *dracel.Cache, line []byte) outcome {
	var c selectorCase
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return outcome{InputError: err.Error()}
	}
	// The scheduler's path: cached compilation without cost estimation, then DeviceMatches.
	expr := cache.GetOrCompile(c.Expression)
	if expr.Error != nil {
		return outcome{CompileError: expr.Error.Error()}
	}
	// The apiserver's admission estimate, reported for the cost-limit comparison only.
	estimated := dracel.GetCompiler(features).CompileCELExpression(c.Expression, dracel.Options{})
	var maxCost *uint64
	if estimated.Error == nil {
		maxCost = ptr.To(estimated.MaxCost)
	}
	matches, details, err := expr.DeviceMatches(context.Background(), dracel.Device{
		Driver:                   c.Driver,
		AllowMultipleAllocations: c.AllowMultipleAllocations,
		Attributes:               c.Attributes,
		Capacity:                 c.Capacity,
	})
	if err != nil {
		return outcome{Error: err.Error(), MaxCost: maxCost}
	}
	out := outcome{Result: ptr.To(matches), MaxCost: maxCost}
	if details != nil {
		out.Cost = details.ActualCost()
	}
	return out
}

func main() {
	cache := dracel.NewCache(1000, features)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 16<<20)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	for in.Scan() {
		line := bytes.TrimSpace(in.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := enc.Encode(evaluate(cache, line)); err != nil {
			fmt.Fprintln(os.Stderr, "dra-cel:", err)
			os.Exit(1)
		}
		// Flush per line so a caller can drive the oracle interactively.
		if err := out.Flush(); err != nil {
			fmt.Fprintln(os.Stderr, "dra-cel:", err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "dra-cel:", err)
		os.Exit(1)
	}
}
