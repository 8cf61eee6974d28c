// Package readme rewrites the generated sections of benchmarks/README.md:
// the text between "<!-- NAME:begin -->" and "<!-- NAME:end -->".
package readme

import (
	"fmt"
	"os"
	"strings"
)

// Rewrite replaces section name of the file at path with text, keeping the
// markers; a file without the section is an error that names the markers.
func Rewrite(path, name, text string) error {
	begin, end := "<!-- "+name+":begin -->", "<!-- "+name+":end -->"
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s ... %s section: add the two markers where the table goes", path, begin, end)
	}
	return os.WriteFile(path, []byte(s[:i+len(begin)]+"\n"+text+"\n"+s[j:]), 0o644)
}
