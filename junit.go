package crabbox

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"strings"

	"github.com/crabbox-dev/crabbox/run"
)

// maxJUnitFile is the largest JUnit file read from a box.
const maxJUnitFile = 64 << 20

// JUnitCounts are test counts from JUnit XML reports.
type JUnitCounts struct {
	Tests    int `json:"tests"`
	Failures int `json:"failures"`
	Errors   int `json:"errors"`
	Skipped  int `json:"skipped"`
}

func (c *JUnitCounts) add(o JUnitCounts) {
	c.Tests += o.Tests
	c.Failures += o.Failures
	c.Errors += o.Errors
	c.Skipped += o.Skipped
}

// JUnitFileError is a JUnit file that could not be read or parsed; it is
// left out of the counts.
type JUnitFileError struct {
	File string `json:"file"`
	Err  string `json:"error"`
}

// JUnitReport is what JUnit collection found on the box after a run.
type JUnitReport struct {
	JUnitCounts
	// Files are the files counted, relative to the workdir.
	Files []string `json:"files,omitempty"`
	// Broken are the files matched but skipped.
	Broken []JUnitFileError `json:"broken,omitempty"`
}

type junitSuite struct {
	XMLName  xml.Name
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Suites   []junitSuite `xml:"testsuite"`
	Cases    []junitCase  `xml:"testcase"`
}

type junitCase struct {
	Failures []struct{} `xml:"failure"`
	Errors   []struct{} `xml:"error"`
	Skipped  []struct{} `xml:"skipped"`
}

// ParseJUnit counts the tests in a JUnit XML report whose root is
// <testsuites> or <testsuite>. Test cases are counted where present; a
// suite without cases contributes its tests/failures/errors/skipped
// attributes.
func ParseJUnit(data []byte) (JUnitCounts, error) {
	var root junitSuite
	dec := xml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		return JUnitCounts{}, fmt.Errorf("parse JUnit XML: %w", err)
	}
	switch root.XMLName.Local {
	case "testsuites", "testsuite":
	default:
		return JUnitCounts{}, fmt.Errorf("parse JUnit XML: root element is <%s>, want <testsuites> or <testsuite>", root.XMLName.Local)
	}
	// Anything but whitespace and comments after the root is malformed.
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if cd, ok := tok.(xml.CharData); ok && len(bytes.TrimSpace(cd)) == 0 {
			continue
		}
		switch tok.(type) {
		case xml.Comment, xml.ProcInst:
			continue
		}
		return JUnitCounts{}, errors.New("parse JUnit XML: content after the root element")
	}
	return root.counts(), nil
}

func (s junitSuite) counts() JUnitCounts {
	var c JUnitCounts
	if len(s.Suites) == 0 && len(s.Cases) == 0 {
		if s.XMLName.Local == "testsuites" && s.Tests == 0 {
			return c
		}
		return JUnitCounts{Tests: s.Tests, Failures: s.Failures, Errors: s.Errors, Skipped: s.Skipped}
	}
	for _, sub := range s.Suites {
		c.add(sub.counts())
	}
	for _, tc := range s.Cases {
		c.Tests++
		switch {
		case len(tc.Errors) > 0:
			c.Errors++
		case len(tc.Failures) > 0:
			c.Failures++
		case len(tc.Skipped) > 0:
			c.Skipped++
		}
	}
	return c
}

// checkJUnitGlob rejects a glob that the remote shell would treat as more
// than patterns: only words of path and glob characters separated by spaces.
func checkJUnitGlob(glob string) error {
	if strings.TrimSpace(glob) == "" {
		return errors.New("junit glob is empty")
	}
	if i := strings.IndexAny(glob, ";&|$`()<>'\"\\\n\t#~={}!"); i >= 0 {
		return fmt.Errorf("junit glob %q: character %q is not allowed (use path and glob characters * ? [ ])", glob, glob[i])
	}
	return nil
}

// collectJUnit finds the files matching glob relative to dir on the box
// (the box's shell expands it) and counts their tests. A file that cannot be
// read or parsed is reported in the result and skipped.
func (l *Lease) collectJUnit(ctx context.Context, dir, glob string) (JUnitReport, error) {
	var rep JUnitReport
	var list bytes.Buffer
	out, err := l.Run(ctx, run.Request{
		Shell:  `for f in ` + glob + `; do if [ -f "$f" ]; then printf '%s\n' "$f"; fi; done`,
		Dir:    dir,
		Stdout: &list,
	})
	if err != nil {
		return rep, fmt.Errorf("list junit files %q on %s: %w", glob, l.ID(), err)
	}
	if out.ExitCode != 0 {
		return rep, fmt.Errorf("list junit files %q on %s: exit %d", glob, l.ID(), out.ExitCode)
	}
	for _, name := range strings.Split(list.String(), "\n") {
		if name == "" {
			continue
		}
		data, err := l.readFile(ctx, dir, name)
		if err == nil {
			var c JUnitCounts
			if c, err = ParseJUnit(data); err == nil {
				rep.add(c)
				rep.Files = append(rep.Files, name)
				continue
			}
		}
		if ctx.Err() != nil {
			return rep, fmt.Errorf("collect junit files on %s: %w", l.ID(), ctx.Err())
		}
		rep.Broken = append(rep.Broken, JUnitFileError{File: name, Err: err.Error()})
	}
	return rep, nil
}

// readFile reads a file of at most maxJUnitFile bytes from the box.
func (l *Lease) readFile(ctx context.Context, dir, name string) ([]byte, error) {
	var buf, stderr bytes.Buffer
	res, err := l.Run(ctx, run.Request{
		Command: []string{"cat", "--", name}, Dir: dir,
		Stdout: &limitedBuffer{buf: &buf, max: maxJUnitFile}, Stderr: &limitedBuffer{buf: &stderr, max: 4096},
	})
	if err != nil {
		if errors.Is(err, errTooLarge) {
			return nil, fmt.Errorf("read %s: larger than %d bytes", name, maxJUnitFile)
		}
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("read %s: cat exited %d: %s", name, res.ExitCode, strings.TrimSpace(stderr.String()))
	}
	return buf.Bytes(), nil
}

var errTooLarge = errors.New("output too large")

type limitedBuffer struct {
	buf *bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.buf.Len()+len(p) > b.max {
		return 0, errTooLarge
	}
	return b.buf.Write(p)
}
