package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinks fails when a relative link or #anchor in README.md, docs/ or
// bench/README.md points nowhere: a file that does not exist, or a heading
// that no file has. make check runs it, so a moved section or a renamed
// file cannot leave a link behind. Links to other sites are not followed.
// A link into a part that was deleted (a folder README.md's parts table
// names, and the copy lacks) is no fault of the copy's: the docs of the
// parts kept stay whole.
func TestDocLinks(t *testing.T) {
	deleted := deletedParts(t)
	files := []string{"README.md", filepath.Join("bench", "README.md")}
	docs, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, docs...)
	anchors := map[string]map[string]bool{} // file → its headings' anchors
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		anchors[path] = headingAnchors(string(text))
		return anchors[path], nil
	}
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(text)) {
			target, anchor, _ := strings.Cut(l.target, "#")
			path := file
			if target != "" {
				path = filepath.Join(filepath.Dir(file), filepath.FromSlash(target))
				if _, err := os.Stat(path); err != nil {
					if deleted[strings.Split(filepath.ToSlash(filepath.Clean(path)), "/")[0]] {
						continue
					}
					t.Errorf("%s:%d: link to %s: no such file %s", file, l.line, l.target, path)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(path, ".md") {
				continue // a line anchor in a source file, which GitHub resolves
			}
			a, err := anchorsOf(path)
			if err != nil {
				t.Errorf("%s:%d: link to %s: %v", file, l.line, l.target, err)
				continue
			}
			if !a[anchor] {
				t.Errorf("%s:%d: link to %s: %s has no heading with anchor #%s", file, l.line, l.target, path, anchor)
			}
		}
	}
}

// deletedParts are the parts README.md's "Make it yours" table names (its
// rows' first cell, a folder) whose folder is gone.
func deletedParts(t *testing.T) map[string]bool {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	deleted := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| \\[`([a-z]+)/`\\]").FindAllStringSubmatch(string(readme), -1) {
		if _, err := os.Stat(m[1]); err != nil {
			deleted[m[1]] = true
		}
	}
	return deleted
}

// link is a link's target and the line it is on.
type link struct {
	target string
	line   int
}

var (
	// inlineLink is [text](target) or ![alt](target); the target ends at a
	// space (before a title) or at the closing parenthesis.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)[^)]*\)`)
	// codeSpan is text between backticks, which is not a link.
	codeSpan = regexp.MustCompile("`[^`]*`")
	// externalLink is a target with a scheme: another site's to check.
	externalLink = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// markdownLinks returns the relative links of a Markdown text, outside
// code blocks and code spans.
func markdownLinks(text string) []link {
	var links []link
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			if !externalLink.MatchString(m[1]) {
				links = append(links, link{target: m[1], line: i + 1})
			}
		}
	}
	return links
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown text: lowercased, with every character but letters, digits,
// spaces, hyphens and underscores dropped, spaces turned into hyphens, and
// "-1", "-2", … added to repeats.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		heading, ok := strings.CutPrefix(line, "#")
		if inFence || !ok {
			continue
		}
		heading = strings.TrimLeft(heading, "#")
		if !strings.HasPrefix(heading, " ") {
			continue // "#word" is not a heading
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		anchor := b.String()
		if n := seen[anchor]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", anchor, n)] = true
		} else {
			anchors[anchor] = true
		}
		seen[anchor]++
	}
	return anchors
}

// TestHeadingAnchors pins the anchor rule to headings of the kinds the
// documents have, as GitHub renders them.
func TestHeadingAnchors(t *testing.T) {
	got := headingAnchors("# webhook\n## Quick start\n### `x509: certificate is valid for …, not …`\n## Make it yours\n## Make it yours\n```\n# not a heading\n```\n#hashtag\n")
	for _, want := range []string{"webhook", "quick-start", "x509-certificate-is-valid-for--not-", "make-it-yours", "make-it-yours-1"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] || got["hashtag"] {
		t.Errorf("got %v: a code block's line or #word made an anchor", got)
	}
}
