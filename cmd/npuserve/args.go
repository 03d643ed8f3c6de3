package main

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/npuserve/npuserve/engine/config"
)

// This file is the command line parser of the commands that take the
// engine flags (`npuserve serve`): vLLM's argparse rules, with the flags
// engine/config describes (config.LookupFlag, config.FlagTable), into
// assignments for config.Build. urfave/cli only dispatches these commands
// (SkipFlagParsing).

// parseServeArgs parses the arguments that follow `npuserve serve` with
// vLLM's argparse rules: --flag value and --flag=value, bool flags without
// a value (or =true/=false), --no-NAME for vLLM's negatable bools, one or
// more values for nargs="+" flags (--served-model-name a b), underscores
// for dashes (--max_model_len), the short aliases (-tp 8), flags before
// and after MODEL alike, negative numbers as values, and "--" ending the
// flags. It returns the flag occurrences in order (config.Build lets later
// ones win) and the positional arguments.
//
// help reports a -h or --help in a flag's place; parsing stops there, as
// argparse prints its help when it meets the flag.
func parseServeArgs(args []string) (as []config.Assignment, positional []string, help bool, err error) {
	for i := 0; i < len(args); i++ {
		tok := args[i]
		if tok == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if !looksLikeFlag(tok) {
			positional = append(positional, tok)
			continue
		}
		if tok == "-h" || tok == "--help" {
			return as, positional, true, nil
		}
		name, value, hasValue := strings.Cut(tok, "=")
		info, _, ok := config.LookupFlag(name)
		if !ok {
			return nil, nil, false, fmt.Errorf("unknown flag %s", name)
		}
		a := config.Assignment{Flag: name}
		switch info.Kind {
		case config.FlagBool:
			a.Bool = true
			if hasValue {
				b, err := strconv.ParseBool(value)
				if err != nil {
					return nil, nil, false, fmt.Errorf("%s: want true or false, got %q", name, value)
				}
				a.Bool = b
			}
		case config.FlagList:
			if hasValue {
				a.List = []string{value}
				break
			}
			for i+1 < len(args) && !looksLikeFlag(args[i+1]) {
				i++
				a.List = append(a.List, args[i])
			}
			if len(a.List) == 0 {
				return nil, nil, false, fmt.Errorf("%s: expected at least one value", name)
			}
		default:
			if !hasValue {
				if i+1 >= len(args) {
					return nil, nil, false, fmt.Errorf("%s: expected a value", name)
				}
				i++
				value = args[i]
			}
			a.Value = value
		}
		as = append(as, a)
	}
	return as, positional, false, nil
}

// serveArgs parses `npuserve serve` arguments (parseServeArgs) and builds
// EngineArgs from them (config.Build: defaults < --config file < flags).
// It returns nil EngineArgs and no error when help was asked for.
func serveArgs(args []string) (a *config.EngineArgs, help bool, err error) {
	as, positional, help, err := parseServeArgs(args)
	if err != nil || help {
		return nil, help, err
	}
	a, err = config.Build(as, positional)
	return a, false, err
}

// looksLikeFlag is argparse's test for an option string: a dash and more,
// but not a negative number (-1, -.5), which is a value.
func looksLikeFlag(s string) bool {
	return len(s) > 1 && s[0] == '-' && !isNegativeNumber(s)
}

// negativeNumber is argparse's _negative_number_matcher.
var negativeNumber = regexp.MustCompile(`^-\d+$|^-\d*\.\d+$`)

func isNegativeNumber(s string) bool { return negativeNumber.MatchString(s) }

// writeEngineFlagsHelp writes the help of a command taking the engine
// flags: name and usage, then every flag of config.FlagTable with its
// aliases, --no- form, usage and default.
func writeEngineFlagsHelp(w io.Writer, name, usage, argsUsage string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "NAME:\n   npuserve %s - %s\n\nUSAGE:\n   npuserve %s %s\n\n", name, usage, name, argsUsage)
	b.WriteString("   Flags follow vLLM's rules, before and after MODEL alike: --flag value or --flag=value,\n" +
		"   --no-FLAG for negatable switches, underscores for dashes, later occurrences win, -- ends the flags.\n\n")
	b.WriteString("OPTIONS:\n")
	tw := tabwriter.NewWriter(&b, 0, 8, 3, ' ', 0)
	for _, f := range config.FlagTable() {
		fmt.Fprintf(tw, "   %s\t%s\n", flagSynopsis(f), flagUsage(f))
	}
	fmt.Fprintf(tw, "   %s\t%s\n", "--help, -h", "show help")
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// flagSynopsis is how help writes a flag's names and value.
func flagSynopsis(f config.FlagInfo) string {
	arg := ""
	switch f.Kind {
	case config.FlagValue:
		arg = " value"
	case config.FlagList:
		arg = " value [value ...]"
	}
	names := []string{"--" + f.Name + arg}
	for _, al := range f.Aliases {
		names = append(names, "-"+al+arg)
	}
	if f.Negatable {
		names = append(names, "--no-"+f.Name)
	}
	return strings.Join(names, ", ")
}

// flagUsage is a flag's help text with its default.
func flagUsage(f config.FlagInfo) string {
	if f.Default == "" {
		return f.Usage
	}
	return fmt.Sprintf("%s (default: %s)", f.Usage, f.Default)
}

// helpTemplate makes text safe as a urfave/cli help template (for
// `npuserve help serve`), which text/template would otherwise expand.
func helpTemplate(text string) string {
	return strings.ReplaceAll(text, "{{", "{{`{{`}}")
}
