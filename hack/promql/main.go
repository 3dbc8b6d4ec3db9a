// The PromQL oracle: evaluates PromQL with Prometheus' own engine (github.com/prometheus/prometheus/promql) over
// samples read from /metrics scrapes, so tests check dashboards' queries as Prometheus would answer them.
//
// stdin, one JSON object:
//
//	{"scrapes": [{"timeMs": 1700000000000, "text": "<exposition>"}],  // parsed with Prometheus' text parser
//	 "labels": {"job": "karpenter"},                                   // target labels, as a scrape config adds
//	 "queries": [{"expr": "sum(rate(x[5m]))", "timeMs": 1700000030000}],
//	 "labelValues": [{"metric": "karpenter_nodes_allocatable", "label": "nodepool"}]}
//
// stdout, one JSON object: {"results": [{"expr", "series": [{"labels": {...}, "value": 1.5}], "error"}],
// "labelValues": [["a", "b"]]}. A query that fails to parse or evaluate has "error" set; the process exits 0
// unless the input itself is unreadable (exit 2).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

type scrape struct {
	TimeMs int64  `json:"timeMs"`
	Text   string `json:"text"`
}

type query struct {
	Expr   string `json:"expr"`
	TimeMs int64  `json:"timeMs"`
}

type labelValuesRequest struct {
	Metric string `json:"metric"`
	Label  string `json:"label"`
}

type input struct {
	Scrapes     []scrape             `json:"scrapes"`
	Labels      map[string]string    `json:"labels"`
	Queries     []query              `json:"queries"`
	LabelValues []labelValuesRequest `json:"labelValues"`
}

type series struct {
	Labels map[string]string `json:"labels"`
	Value  *float64          `json:"value"` // null for NaN (JSON has no NaN)
}

type result struct {
	Expr   string   `json:"expr"`
	Series []series `json:"series"`
	Error  string   `json:"error,omitempty"`
}

// sample is one float sample (chunks.Sample).
type sample struct {
	t int64
	f float64
}

func (s sample) T() int64                      { return s.t }
func (s sample) ST() int64                     { return 0 }
func (s sample) F() float64                    { return s.f }
func (s sample) H() *histogram.Histogram       { return nil }
func (s sample) FH() *histogram.FloatHistogram { return nil }
func (s sample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s sample) Copy() chunks.Sample           { return s }

// memory is an in-memory storage.Queryable: every series with its samples in time order.
type memory struct {
	series map[string]labels.Labels
	points map[string][]chunks.Sample
}

func (m *memory) add(lset labels.Labels, t int64, v float64) {
	key := lset.String()
	if _, ok := m.series[key]; !ok {
		m.series[key] = lset
	}
	m.points[key] = append(m.points[key], sample{t, v})
}

func (m *memory) load(s scrape, target map[string]string) error {
	p := textparse.NewPromParser([]byte(s.Text), labels.NewSymbolTable(), false)
	for {
		entry, err := p.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if entry != textparse.EntrySeries {
			continue
		}
		_, ts, v := p.Series()
		var lset labels.Labels
		p.Labels(&lset)
		b := labels.NewBuilder(lset)
		for k, val := range target {
			if !lset.Has(k) {
				b.Set(k, val)
			}
		}
		t := s.TimeMs
		if ts != nil {
			t = *ts
		}
		m.add(b.Labels(), t, v)
	}
}

func (m *memory) Querier(_, _ int64) (storage.Querier, error) { return m, nil }

func (m *memory) matching(matchers []*labels.Matcher) []string {
	var keys []string
	for key, lset := range m.series {
		ok := true
		for _, matcher := range matchers {
			if !matcher.Matches(lset.Get(matcher.Name)) {
				ok = false
				break
			}
		}
		if ok {
			keys = append(keys, key)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return labels.Compare(m.series[keys[i]], m.series[keys[j]]) < 0 })
	return keys
}

func (m *memory) Select(_ context.Context, _ bool, _ *storage.SelectHints, matchers ...*labels.Matcher) storage.SeriesSet {
	keys := m.matching(matchers)
	out := make([]storage.Series, 0, len(keys))
	for _, key := range keys {
		out = append(out, storage.NewListSeries(m.series[key], m.points[key]))
	}
	return &seriesSet{items: out, at: -1}
}

func (m *memory) LabelValues(_ context.Context, name string, _ *storage.LabelHints, matchers ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	seen := map[string]bool{}
	for _, key := range m.matching(matchers) {
		if v := m.series[key].Get(name); v != "" {
			seen[v] = true
		}
	}
	values := make([]string, 0, len(seen))
	for v := range seen {
		values = append(values, v)
	}
	slices.Sort(values)
	return values, nil, nil
}

func (m *memory) LabelNames(_ context.Context, _ *storage.LabelHints, matchers ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	seen := map[string]bool{}
	for _, key := range m.matching(matchers) {
		m.series[key].Range(func(l labels.Label) { seen[l.Name] = true })
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil, nil
}

func (m *memory) Close() error { return nil }

type seriesSet struct {
	items []storage.Series
	at    int
}

func (s *seriesSet) Next() bool                        { s.at++; return s.at < len(s.items) }
func (s *seriesSet) At() storage.Series                { return s.items[s.at] }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }

func asMap(lset labels.Labels) map[string]string {
	out := map[string]string{}
	lset.Range(func(l labels.Label) { out[l.Name] = l.Value })
	return out
}

func number(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func evaluate(engine *promql.Engine, store *memory, q query) result {
	out := result{Expr: q.Expr, Series: []series{}}
	compiled, err := engine.NewInstantQuery(context.Background(), store, nil, q.Expr, time.UnixMilli(q.TimeMs))
	if err != nil {
		out.Error = err.Error()
		return out
	}
	defer compiled.Close()
	res := compiled.Exec(context.Background())
	if res.Err != nil {
		out.Error = res.Err.Error()
		return out
	}
	switch value := res.Value.(type) {
	case promql.Vector:
		for _, s := range value {
			out.Series = append(out.Series, series{asMap(s.Metric), number(s.F)})
		}
	case promql.Scalar:
		out.Series = append(out.Series, series{map[string]string{}, number(value.V)})
	case promql.Matrix:
		for _, s := range value {
			if len(s.Floats) > 0 {
				out.Series = append(out.Series, series{asMap(s.Metric), number(s.Floats[len(s.Floats)-1].F)})
			}
		}
	default:
		out.Error = fmt.Sprintf("unsupported result type %s", res.Value.Type())
	}
	return out
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintf(os.Stderr, "promql: reading the request: %v\n", err)
		os.Exit(2)
	}
	store := &memory{series: map[string]labels.Labels{}, points: map[string][]chunks.Sample{}}
	for i, s := range in.Scrapes {
		if err := store.load(s, in.Labels); err != nil {
			fmt.Fprintf(os.Stderr, "promql: scrape %d: %v\n", i, err)
			os.Exit(2)
		}
	}
	for key := range store.points {
		pts := store.points[key]
		sort.SliceStable(pts, func(i, j int) bool { return pts[i].T() < pts[j].T() })
	}
	engine := promql.NewEngine(promql.EngineOpts{
		MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute,
		Parser: parser.NewParser(parser.Options{}),
	})
	results := make([]result, 0, len(in.Queries))
	for _, q := range in.Queries {
		results = append(results, evaluate(engine, store, q))
	}
	values := make([][]string, 0, len(in.LabelValues))
	for _, req := range in.LabelValues {
		vs, _, _ := store.LabelValues(context.Background(), req.Label, nil,
			labels.MustNewMatcher(labels.MatchEqual, labels.MetricName, req.Metric))
		values = append(values, vs)
	}
	if err := json.NewEncoder(os.Stdout).Encode(map[string]any{"results": results, "labelValues": values}); err != nil {
		fmt.Fprintf(os.Stderr, "promql: writing the answer: %v\n", err)
		os.Exit(1)
	}
}
