// promcheck: what `promtool check rules` checks, and the metric names PromQL selects, from
// the Prometheus module itself (built by tests/monitoring/promcheck.py from the Go module
// proxy, like the control plane; promtool's own command pulls in every service discovery).
//
//	promcheck rules FILE...  validate rule files as promtool does (rulefmt.ParseFile with
//	                         promtool's defaults, duplicate rules); print the metric names
//	                         their expressions select, as JSON
//	promcheck exprs          parse a JSON list of PromQL expressions from stdin; print the
//	                         metric names they select, as JSON
//
// Exit status 1 with the errors on stderr when anything does not parse.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

var promql = parser.NewParser(parser.Options{})

// names adds the metric names an expression selects (vector and matrix selectors).
func names(expr parser.Expr, into map[string]bool) {
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
			into[name] = true
		}
		return nil
	})
}

func rules(files []string, found map[string]bool) []error {
	var errs []error
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	for _, file := range files {
		groups, fileErrs := rulefmt.ParseFile(file, false, model.UTF8Validation, promql, logger)
		errs = append(errs, fileErrs...)
		if groups == nil {
			continue
		}
		seen := map[string]bool{}
		for _, group := range groups.Groups {
			if seen[group.Name] {
				errs = append(errs, fmt.Errorf("%s: group %q twice", file, group.Name))
			}
			seen[group.Name] = true
			rules := map[string]bool{}
			for _, rule := range group.Rules {
				key := rule.Alert + rule.Record + fmt.Sprint(rule.Labels)
				if rules[key] {
					errs = append(errs, fmt.Errorf("%s: group %q: duplicate rule %q", file, group.Name, rule.Alert+rule.Record))
				}
				rules[key] = true
				expr, err := promql.ParseExpr(rule.Expr)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				names(expr, found)
			}
		}
	}
	return errs
}

func exprs(input io.Reader, found map[string]bool) []error {
	var list []string
	if err := json.NewDecoder(input).Decode(&list); err != nil {
		return []error{fmt.Errorf("stdin: a JSON list of expressions: %w", err)}
	}
	var errs []error
	for _, text := range list {
		expr, err := promql.ParseExpr(text)
		if err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", text, err))
			continue
		}
		names(expr, found)
	}
	return errs
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: promcheck rules FILE... | promcheck exprs < list.json")
		os.Exit(2)
	}
	found := map[string]bool{}
	var errs []error
	switch os.Args[1] {
	case "rules":
		errs = rules(os.Args[2:], found)
	case "exprs":
		errs = exprs(os.Stdin, found)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
	for _, err := range errs {
		fmt.Fprintln(os.Stderr, err)
	}
	if len(errs) > 0 {
		os.Exit(1)
	}
	list := make([]string, 0, len(found))
	for name := range found {
		list = append(list, name)
	}
	sort.Strings(list)
	out, _ := json.Marshal(map[string][]string{"metrics": list})
	fmt.Println(string(out))
}
