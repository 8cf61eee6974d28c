// Package readme rewrites the generated sections of the benchmarks' notes
// (benchmarks/NOTES.md by default; the tools' -readme flag picks the file):
// the text between "<!-- NAME:begin -->" and "<!-- NAME:end -->".
package readme

import (
	"fmt"
	"os"
	"path/filepath"
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

// Link is the markdown link to file from the document at doc: file's path
// relative to doc's folder, with forward slashes (benchmarks/NOTES.md to
// benchmarks/results/x.png: results/x.png). Where no relative path exists
// (one absolute, the other not) or doc is empty, it is file as given.
func Link(doc, file string) string {
	if doc == "" {
		return filepath.ToSlash(file)
	}
	rel, err := filepath.Rel(filepath.Dir(doc), file)
	if err != nil {
		return filepath.ToSlash(file)
	}
	return filepath.ToSlash(rel)
}
