package human

import (
	"io"
	"unicode/utf8"
)

// What reaches an operator's terminal from the database (queue, node and
// plugin names, task parameters, reasons, a task's output) is escaped, so
// that a task's program or anyone with insert rights cannot clear the
// screen, retitle the terminal, move the cursor, hide text or reorder what
// is shown. The escapes are Go's, as den task show has always printed
// strings (strconv.Quote): \t \n \r \a \b \f \v, \x1b for other C0 bytes
// and DEL, \u009b for C1 characters, \xff for each byte that is not UTF-8,
// \u202e for bidirectional formatting characters. A backslash is printed
// as it is: "\x1b" in a table is either an escaped ESC or those four
// characters in the name; --json tells them apart.

// Escaped reports whether r is escaped wherever den prints text for a
// terminal: C0 controls (U+0000–U+001F), DEL (U+007F), C1 controls
// (U+0080–U+009F, which many terminals act on as CSI, OSC, ...), the
// Unicode bidirectional formatting characters (U+061C, U+200E, U+200F,
// U+202A–U+202E, U+2066–U+2069: they reorder what follows them) and the
// line and paragraph separators (U+2028, U+2029). utf8.RuneError stands
// for a byte that is not UTF-8 and is escaped too (as \x..). Other
// characters, including other invisible ones such as U+200B, are printed:
// they neither act on the terminal nor reorder text.
func Escaped(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

// Escape renders s for one line of a terminal, or one cell of a table:
// every character Escaped names is written as its escape, tabs and
// newlines too (they would break the line or the table).
func Escape(s string) string {
	if clean(s, false) {
		return s
	}
	out, _ := appendEscaped(nil, []byte(s), false, true)
	return string(out)
}

// EscapeText renders s, text of several lines such as a task's output,
// for a terminal: as Escape, but newlines, tabs and a carriage return
// right before a newline ("\r\n") are printed as they are.
func EscapeText(s string) string {
	if clean(s, true) {
		return s
	}
	out, _ := appendEscaped(nil, []byte(s), true, true)
	return string(out)
}

// clean reports whether s has nothing to escape.
func clean(s string, lines bool) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			if lines && (c == '\n' || c == '\t') {
				continue
			}
			return false
		}
	}
	return true
}

// appendEscaped appends p escaped to dst and returns how much of p it
// consumed: all of it when final, else all but a tail that may be the
// start of a character or a "\r\n" split across writes.
func appendEscaped(dst, p []byte, lines, final bool) ([]byte, int) {
	i := 0
	for i < len(p) {
		c := p[i]
		if c >= 0x20 && c < 0x7f {
			dst = append(dst, c)
			i++
			continue
		}
		if lines {
			switch {
			case c == '\n', c == '\t':
				dst = append(dst, c)
				i++
				continue
			case c == '\r' && i+1 < len(p) && p[i+1] == '\n':
				dst = append(dst, '\r', '\n')
				i += 2
				continue
			case c == '\r' && i+1 == len(p) && !final:
				return dst, i
			}
		}
		if !final && !utf8.FullRune(p[i:]) {
			return dst, i
		}
		r, n := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			dst = appendHex(dst, `\x`, uint32(c), 2)
		case !Escaped(r):
			dst = append(dst, p[i:i+n]...)
		case r == '\a':
			dst = append(dst, `\a`...)
		case r == '\b':
			dst = append(dst, `\b`...)
		case r == '\f':
			dst = append(dst, `\f`...)
		case r == '\n':
			dst = append(dst, `\n`...)
		case r == '\r':
			dst = append(dst, `\r`...)
		case r == '\t':
			dst = append(dst, `\t`...)
		case r == '\v':
			dst = append(dst, `\v`...)
		case r < 0x80:
			dst = appendHex(dst, `\x`, uint32(r), 2)
		default:
			dst = appendHex(dst, `\u`, uint32(r), 4)
		}
		i += n
	}
	return dst, i
}

// appendHex appends prefix and the low digits hex digits of v.
func appendHex(dst []byte, prefix string, v uint32, digits int) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, prefix...)
	for shift := 4 * (digits - 1); shift >= 0; shift -= 4 {
		dst = append(dst, hex[(v>>shift)&0xf])
	}
	return dst
}

// TextWriter writes what is written to it escaped as EscapeText does, for
// output that arrives in pieces (GridFS chunks, live output): a character
// or "\r\n" split between two writes is held until the next one. Flush
// writes what is held when no more comes.
type TextWriter struct {
	w    io.Writer
	held []byte
	buf  []byte
}

// NewTextWriter returns a TextWriter writing to w.
func NewTextWriter(w io.Writer) *TextWriter { return &TextWriter{w: w} }

// Write escapes p and writes it, holding back at most an incomplete
// character or a final carriage return. It reports all of p written
// unless w failed: n counts p's bytes, not the escaped ones.
func (t *TextWriter) Write(p []byte) (int, error) {
	in := p
	if len(t.held) > 0 {
		in = append(t.held, p...)
	}
	out, used := appendEscaped(t.buf[:0], in, true, false)
	t.held = append(t.held[:0:0], in[used:]...)
	t.buf = out[:0]
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what is held, escaped as at the end of the text.
func (t *TextWriter) Flush() error {
	if len(t.held) == 0 {
		return nil
	}
	out, _ := appendEscaped(nil, t.held, true, true)
	t.held = nil
	_, err := t.w.Write(out)
	return err
}

// EscapeJSON makes encoded JSON safe for a terminal without changing what
// it decodes to: a character Escaped names that JSON encoders leave as it
// is (DEL, C1, bidirectional formatting, U+2028/U+2029) is written as a
// \u escape, and a byte that is not UTF-8 as \ufffd (what encoding/json
// decodes it to anyway). JSON text has such characters only inside
// strings, where \u escapes mean the same; control characters below U+0020
// cannot occur raw in valid JSON.
func EscapeJSON(b []byte) []byte {
	if clean(string(b), true) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = append(out, `\ufffd`...)
		case r >= 0x20 && Escaped(r):
			out = appendHex(out, `\u`, uint32(r), 4)
		default:
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}
