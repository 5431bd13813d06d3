package human

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestEscape(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, line, text string }{
		{"resize", "resize", "resize"},
		{"q\x1b]0;pwned\x07", `q\x1b]0;pwned\a`, `q\x1b]0;pwned\a`},
		{"a\tb\nc\r\nd\re", `a\tb\nc\r\nd\re`, "a\tb\nc\r\nd\\re"},
		{"\x00\x7f\u0085\u009b", `\x00\x7f\u0085\u009b`, `\x00\x7f\u0085\u009b`},
		{"abc\u202edef\u2066\u200f\u061c\u2028", `abc\u202edef\u2066\u200f\u061c\u2028`, `abc\u202edef\u2066\u200f\u061c\u2028`},
		{"bad\xff\xc3(", `bad\xff\xc3(`, `bad\xff\xc3(`},
		{`C:\temp é 中 👍 \u200b` + "\u200b", `C:\temp é 中 👍 \u200b` + "\u200b", `C:\temp é 中 👍 \u200b` + "\u200b"},
	} {
		if got := Escape(c.in); got != c.line {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.line)
		}
		if got := EscapeText(c.in); got != c.text {
			t.Errorf("EscapeText(%q) = %q, want %q", c.in, got, c.text)
		}
	}
}

// A character, or "\r\n", split between two writes is escaped as if it
// came in one, and what is still held at the end is written by Flush.
func TestTextWriterSplits(t *testing.T) {
	t.Parallel()
	in := "a\u202eb\r\nc\u009b\x1b[2J\xe4\xb8\xad\r"
	want := EscapeText(in)
	for size := 1; size <= len(in); size++ {
		var out strings.Builder
		w := NewTextWriter(&out)
		for i := 0; i < len(in); i += size {
			p := []byte(in[i:min(i+size, len(in))])
			if n, err := w.Write(p); n != len(p) || err != nil {
				t.Fatalf("Write(%q) = %d, %v", p, n, err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Errorf("in writes of %d bytes: %q, want %q", size, out.String(), want)
		}
	}
	if want != `a\u202eb`+"\r\n"+`c\u009b\x1b[2J中\r` {
		t.Errorf("EscapeText = %q", want)
	}
}

// JSON made safe decodes to the same values.
func TestEscapeJSON(t *testing.T) {
	t.Parallel()
	v := map[string]string{"q\x1b]0;x\x07": "\u009b2J\u202e\x7f\u2029é"}
	b, _ := json.Marshal(v)
	safe := EscapeJSON(b)
	for _, r := range string(safe) {
		if Escaped(r) {
			t.Fatalf("%q left in %s", r, safe)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(safe, &back); err != nil || back["q\x1b]0;x\x07"] != v["q\x1b]0;x\x07"] {
		t.Fatalf("%s decodes to %q, %v", safe, back, err)
	}
}
