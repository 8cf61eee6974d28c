package train

// The strategies' own flags on a command line (cmd/train's): every
// registered strategy's options define theirs (Options.AddFlags), so that
// -help lists them all and any of them parses; the run's strategy then
// takes the values given.

import (
	"flag"
	"fmt"
	"strings"
)

// StrategyFlags are the flags of every registered strategy's options,
// defined on one FlagSet by AddStrategyFlags.
type StrategyFlags struct {
	fs *flag.FlagSet
	// owners lists, for each flag, the strategies whose options have it.
	owners map[string][]string
}

// AddStrategyFlags defines on fs the flags of every registered strategy's
// options, with their defaults and usage. A flag that several strategies'
// options define (ddp's and zero's -bucket-mb) is defined once; they must
// agree on its default and usage (AddStrategyFlags panics otherwise, or
// when fs has the flag already). Call it after the strategies registered
// (from main, not from an init function), then StrategyFlags.Options
// after fs.Parse.
func AddStrategyFlags(fs *flag.FlagSet) *StrategyFlags {
	sf := &StrategyFlags{fs: fs, owners: map[string][]string{}}
	for _, name := range Strategies() {
		f, _ := lookup(name)
		if f.Options == nil {
			continue
		}
		own := flag.NewFlagSet(name, flag.ContinueOnError)
		f.Options().AddFlags(own)
		own.VisitAll(func(fl *flag.Flag) {
			prev := fs.Lookup(fl.Name)
			switch {
			case prev == nil:
				fs.Var(fl.Value, fl.Name, fl.Usage)
			case sf.owners[fl.Name] == nil:
				panic(fmt.Sprintf("train: strategy %s's flag -%s is defined already", name, fl.Name))
			case prev.DefValue != fl.DefValue || prev.Usage != fl.Usage:
				panic(fmt.Sprintf("train: strategies %s and %s define -%s differently", sf.owners[fl.Name][0], name, fl.Name))
			}
			sf.owners[fl.Name] = append(sf.owners[fl.Name], name)
		})
	}
	return sf
}

// Options returns the options of strategy (for Config.Options) as the
// parsed command line sets them: the strategy's defaults, with the value
// of every one of its flags that was given. A flag of other strategies'
// options that strategy lacks, given a value other than its default, is
// an error wrapping ErrConfig naming the flags and the strategies that
// have them. For a strategy with no options, or none registered under
// that name (Config.Validate reports it), it returns nil.
func (sf *StrategyFlags) Options(strategy string) (Options, error) {
	f, ok := lookup(strategy)
	if !ok {
		return nil, nil
	}
	var o Options
	own := flag.NewFlagSet(strategy, flag.ContinueOnError)
	if f.Options != nil {
		o = f.Options()
		o.AddFlags(own)
	}
	var err error
	var foreign []string // flags of other strategies, given
	var owners []string  // the strategies that have foreign[0]
	sf.fs.Visit(func(fl *flag.Flag) {
		switch {
		case sf.owners[fl.Name] == nil || err != nil:
		case own.Lookup(fl.Name) != nil:
			if e := own.Set(fl.Name, fl.Value.String()); e != nil {
				err = fmt.Errorf("%w: -%s %s: %v", ErrConfig, fl.Name, fl.Value, e)
			}
		case fl.Value.String() == fl.DefValue:
		case owners == nil:
			owners = sf.owners[fl.Name]
			foreign = append(foreign, "-"+fl.Name)
		case strings.Join(owners, " ") == strings.Join(sf.owners[fl.Name], " "):
			foreign = append(foreign, "-"+fl.Name)
		}
	})
	if err != nil {
		return nil, err
	}
	if foreign != nil {
		verb := "apply"
		if len(foreign) == 1 {
			verb = "applies"
		}
		return nil, fmt.Errorf("%w: %s %s to -strategy %s only (this run: %s)", ErrConfig, joinWords(foreign, "and"), verb, joinWords(owners, "or"), strategy)
	}
	return o, nil
}

// joinWords joins words as "a", "a and b", "a, b and c" (with "or" for
// "and" as asked).
func joinWords(words []string, and string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + and + " " + words[len(words)-1]
}
