// Package remote holds what every part of crabbox that talks to a POSIX box
// over SSH needs: shell quoting and sessions that respect a context.
package remote

import "strings"

// Quote quotes s as one word for a POSIX shell. The run package exports it
// as run.Quote (and CommandLine as run.QuoteCommand) for library users. Words made only of
// characters that are never special to sh are returned unchanged; anything
// else is wrapped in single quotes, each embedded single quote becoming a
// closing quote, an escaped quote and an opening quote:
//
//	Quote("it's") == `'it'\''s'`
//	Quote("")     == `''`
func Quote(s string) string {
	if s != "" && isPlainWord(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func isPlainWord(s string) bool {
	for _, r := range s {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		case strings.ContainsRune("_@%+:,./-", r):
		default:
			return false
		}
	}
	return true
}

// reservedWords are the words sh (and bash) treat as syntax in command
// position; a command name spelled like one must be quoted.
var reservedWords = map[string]bool{
	"case": true, "do": true, "done": true, "elif": true, "else": true,
	"esac": true, "fi": true, "for": true, "if": true, "in": true,
	"then": true, "until": true, "while": true, "select": true,
	"function": true, "time": true, "coproc": true,
}

// CommandLine quotes argv into a shell command line that runs argv[0] with
// the remaining words as its arguments.
func CommandLine(argv []string) string {
	words := make([]string, len(argv))
	for i, w := range argv {
		if i == 0 && reservedWords[w] {
			words[i] = "'" + w + "'"
			continue
		}
		words[i] = Quote(w)
	}
	return strings.Join(words, " ")
}
