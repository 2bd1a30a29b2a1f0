// Package junit counts the tests in JUnit XML reports: Parse reads one
// report, and Collect finds the reports a run left on a box and adds them
// up, skipping (and naming) any file that cannot be read or parsed.
package junit

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/run"
)

// maxFile is the largest JUnit file read from a box.
const maxFile = 64 << 20

// Counts are test counts from JUnit XML reports.
type Counts struct {
	Tests    int `json:"tests"`
	Failures int `json:"failures"`
	Errors   int `json:"errors"`
	Skipped  int `json:"skipped"`
}

func (c *Counts) add(o Counts) {
	c.Tests += o.Tests
	c.Failures += o.Failures
	c.Errors += o.Errors
	c.Skipped += o.Skipped
}

// FileError is a JUnit file that could not be read or parsed; it is
// left out of the counts.
type FileError struct {
	File string `json:"file"`
	Err  string `json:"error"`
}

// Report is what Collect found on the box after a run.
type Report struct {
	Counts
	// Files are the files counted, relative to the workdir.
	Files []string `json:"files,omitempty"`
	// Broken are the files matched but skipped.
	Broken []FileError `json:"broken,omitempty"`
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

// Parse counts the tests in a JUnit XML report whose root is
// <testsuites> or <testsuite>. Test cases are counted where present; a
// suite without cases contributes its tests/failures/errors/skipped
// attributes.
func Parse(data []byte) (Counts, error) {
	var root junitSuite
	dec := xml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		return Counts{}, fmt.Errorf("parse JUnit XML: %w", err)
	}
	switch root.XMLName.Local {
	case "testsuites", "testsuite":
	default:
		return Counts{}, fmt.Errorf("parse JUnit XML: root element is <%s>, want <testsuites> or <testsuite>", root.XMLName.Local)
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
		return Counts{}, errors.New("parse JUnit XML: content after the root element")
	}
	return root.counts(), nil
}

func (s junitSuite) counts() Counts {
	var c Counts
	if len(s.Suites) == 0 && len(s.Cases) == 0 {
		if s.XMLName.Local == "testsuites" && s.Tests == 0 {
			return c
		}
		return Counts{Tests: s.Tests, Failures: s.Failures, Errors: s.Errors, Skipped: s.Skipped}
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

// CheckGlob rejects a glob that the remote shell would treat as more than
// patterns: only words of path and glob characters separated by spaces.
func CheckGlob(glob string) error {
	if strings.TrimSpace(glob) == "" {
		return errors.New("junit glob is empty")
	}
	if i := strings.IndexAny(glob, ";&|$`()<>'\"\\\n\t#~={}!"); i >= 0 {
		return fmt.Errorf("junit glob %q: character %q is not allowed (use path and glob characters * ? [ ])", glob, glob[i])
	}
	return nil
}

// Collect finds the files matching glob (checked by CheckGlob) relative to
// dir on the box that conn reaches (the box's shell expands it) and counts
// their tests. A file that cannot be read or parsed is reported in the
// result and skipped.
func Collect(ctx context.Context, conn *ssh.Client, dir, glob string) (Report, error) {
	if err := CheckGlob(glob); err != nil {
		return Report{}, err
	}
	var rep Report
	var list bytes.Buffer
	out, err := run.Run(ctx, conn, run.Command{
		Shell:  `for f in ` + glob + `; do if [ -f "$f" ]; then printf '%s\n' "$f"; fi; done`,
		Dir:    dir,
		Stdout: &list,
	})
	if err != nil {
		return rep, fmt.Errorf("list junit files %q: %w", glob, err)
	}
	if out.ExitCode != 0 {
		return rep, fmt.Errorf("list junit files %q: exit %d", glob, out.ExitCode)
	}
	for _, name := range strings.Split(list.String(), "\n") {
		if name == "" {
			continue
		}
		data, err := readFile(ctx, conn, dir, name)
		if err == nil {
			var c Counts
			if c, err = Parse(data); err == nil {
				rep.add(c)
				rep.Files = append(rep.Files, name)
				continue
			}
		}
		if ctx.Err() != nil {
			return rep, fmt.Errorf("collect junit files: %w", ctx.Err())
		}
		rep.Broken = append(rep.Broken, FileError{File: name, Err: err.Error()})
	}
	return rep, nil
}

// readFile reads a file of at most maxFile bytes from the box.
func readFile(ctx context.Context, conn *ssh.Client, dir, name string) ([]byte, error) {
	var buf, stderr bytes.Buffer
	res, err := run.Run(ctx, conn, run.Command{
		Command: []string{"cat", "--", name}, Dir: dir,
		Stdout: &limitedBuffer{buf: &buf, max: maxFile}, Stderr: &limitedBuffer{buf: &stderr, max: 4096},
	})
	if err != nil {
		if errors.Is(err, errTooLarge) {
			return nil, fmt.Errorf("read %s: larger than %d bytes", name, maxFile)
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
