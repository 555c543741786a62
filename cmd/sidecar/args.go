package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// usageArgs makes the errors of cmd's argument check usage errors (exit 2)
// that name what is missing or extra by the names cmd's Use line gives its
// arguments ("missing KEY"), in place of cobra's "accepts 1 arg(s),
// received 0".
func usageArgs(cmd *cobra.Command, check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if err := check(c, args); err != nil {
			return usageError{argsError(cmd, args, err)}
		}
		return nil
	}
}

// argsError says what is wrong with args against cmd's Use line, or err
// with the usage when that line does not tell.
func argsError(cmd *cobra.Command, args []string, err error) error {
	usage := "usage: " + cmd.Use
	if cmd.HasParent() {
		usage = "usage: " + cmd.Parent().CommandPath() + " " + cmd.Use
	}
	required, most := positionals(cmd.Use)
	switch {
	case len(args) < len(required):
		return fmt.Errorf("missing %s (%s)", strings.Join(required[len(args):], " and "), usage)
	case most == 0 && len(args) > 0:
		return fmt.Errorf("unexpected argument %q: %s takes no arguments (%s)", args[0], cmd.CommandPath(), usage)
	case most > 0 && len(args) > most:
		return fmt.Errorf("unexpected argument %q (%s)", args[most], usage)
	}
	return fmt.Errorf("%w (%s)", err, usage)
}

// positionals reads a Use line ("status KEY", "run --key KEY [flags] --
// COMMAND [ARGS...]", "watch [KEY | --prefix P]"): the names of the
// arguments it requires, in order, and how many it takes at most (-1: no
// limit). A name is a word in capitals that is not a flag's value; in
// brackets it is optional; with "..." it repeats.
func positionals(use string) (required []string, most int) {
	words := strings.Fields(use)
	if len(words) == 0 {
		return nil, -1
	}
	prev, depth := "", 0 // depth: how many brackets are open before w
	for _, w := range words[1:] {
		name := strings.Trim(w, "[]().|")
		optional := depth > 0 || strings.HasPrefix(w, "[")
		depth += strings.Count(w, "[") - strings.Count(w, "]")
		isFlagValue := strings.HasPrefix(strings.TrimLeft(prev, "[(|"), "-") && strings.TrimLeft(prev, "[(|") != "--"
		prev = w
		if name == "" || name != strings.ToUpper(name) || isFlagValue || strings.HasPrefix(name, "-") {
			continue
		}
		if strings.HasSuffix(w, "...]") || strings.HasSuffix(w, "...") {
			most = -1
			continue
		}
		if most >= 0 {
			most++
		}
		if !optional {
			required = append(required, name)
		}
	}
	return required, most
}
