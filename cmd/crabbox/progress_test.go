package main

import (
	"bytes"
	"testing"
)

func TestStatusLineQuietWhenPiped(t *testing.T) {
	var buf bytes.Buffer
	s := &statusLine{w: &buf}
	if s.syncProgress() != nil {
		t.Fatal("progress callback on a non-terminal")
	}
	s.clear()
	if _, err := s.before(&buf).Write([]byte("out\n")); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != "out\n" {
		t.Errorf("piped output = %q, want only the command's output", got)
	}
}

func TestStatusLineClearedBeforeOutput(t *testing.T) {
	var term bytes.Buffer
	s := &statusLine{w: &term, shown: true}
	if _, err := s.before(&term).Write([]byte("out\n")); err != nil {
		t.Fatal(err)
	}
	if got, want := term.String(), "\r\033[Kout\n"; got != want {
		t.Errorf("output = %q, want the status line cleared first (%q)", got, want)
	}
}
