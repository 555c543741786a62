// Command promql-names parses PromQL expressions with Prometheus's own
// parser, one per line of its standard input, and prints for each a line
// with the metric names it selects, separated by spaces. A line that does
// not parse is an error (exit status 1). Baton's alert tests use it to
// check that the dashboard and the alerts read only metrics Baton exports.
package main

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	p := parser.NewParser(parser.Options{})
	for n := 1; in.Scan(); n++ {
		expr, err := p.ParseExpr(in.Text())
		if err != nil {
			fmt.Fprintf(os.Stderr, "line %d: %q: %v\n", n, in.Text(), err)
			os.Exit(1)
		}
		var names []string
		parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
			if vs, ok := node.(*parser.VectorSelector); ok && vs.Name != "" && !slices.Contains(names, vs.Name) {
				names = append(names, vs.Name)
			}
			return nil
		})
		fmt.Println(strings.Join(names, " "))
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
