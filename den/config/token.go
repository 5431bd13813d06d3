package config

import (
	"fmt"
	"math"
	"strings"
	"unicode"
)

// MinWebTokenLength is the shortest web.token accepted, and
// MinWebTokenBits the least strength, as tokenBits estimates it. The
// token is what bounds guessing on the web page: its right token is
// accepted from any address at any time (so that a guesser cannot lock
// the operator out), so every guess gets an answer, at most as fast as
// den web answers (BenchmarkGuessing: a few thousand a second on 2
// cores). At a million a second, 2^80 guesses take 38 billion years;
// the margin above 64 bits (half a million years) is for the estimate's
// optimism about a token a person made up.
const (
	MinWebTokenLength = 16
	MinWebTokenBits   = 80
)

// checkWebToken refuses a web.token shorter than MinWebTokenLength or
// estimated below MinWebTokenBits. The error never shows the token.
func checkWebToken(token string) error {
	n := len([]rune(token))
	if n < MinWebTokenLength {
		return fmt.Errorf("web.token is %d characters; use at least %d, made by a random generator (e.g. the output of: openssl rand -hex 32), or none for a read-only page", n, MinWebTokenLength)
	}
	if bits := tokenBits(token); bits < MinWebTokenBits {
		return fmt.Errorf("web.token is too easy to guess: about %.0f bits by den's estimate (repeats, runs such as abc or 123, keyboard rows and repeated stretches count for little), below the %d needed; use the output of a random generator, e.g. openssl rand -hex 32", math.Floor(bits), MinWebTokenBits)
	}
	return nil
}

// keyboardRows are the rows of a US keyboard: a character next to the
// previous one on a row (qwerty, asdf) adds little.
var keyboardRows = []string{"`1234567890-=", "qwertyuiop[]\\", "asdfghjkl;'", "zxcvbnm,./"}

// tokenBits estimates how many guesses, as a power of two, finding token
// takes, conservatively and without a dictionary. Each character is worth
// log2 of the alphabet the token draws from: hexadecimal digits (16) if
// it is all of one case of them, else the sum of the classes it uses
// (lower case 26, upper case 26, digits 10, other printable ASCII 33,
// anything else 100). A character worth 1 bit instead: one that repeats
// the previous, continues a run up or down by one (abc, 321), is next to
// the previous on a keyboard row (qwerty), or ends a three-character
// stretch that already occurred earlier in the token (passwordpassword).
// Words are not recognised: "MyDenWebToken2024!" scores well and is not
// strong; the documentation says to generate the token.
func tokenBits(token string) float64 {
	rs := []rune(token)
	per := math.Log2(float64(alphabet(rs)))
	bits := 0.0
	for i := range rs {
		if i > 0 && predictable(rs, i) {
			bits++
			continue
		}
		bits += per
	}
	return bits
}

// alphabet is the size of the alphabet rs appear drawn from.
func alphabet(rs []rune) int {
	lowerHex, upperHex := true, true
	var lower, upper, digit, other, wide bool
	for _, r := range rs {
		switch {
		case r >= 'a' && r <= 'z':
			lower = true
		case r >= 'A' && r <= 'Z':
			upper = true
		case r >= '0' && r <= '9':
			digit = true
		case r < 128:
			other = true
		default:
			wide = true
		}
		if !strings.ContainsRune("0123456789abcdef", r) {
			lowerHex = false
		}
		if !strings.ContainsRune("0123456789ABCDEF", r) {
			upperHex = false
		}
	}
	if lowerHex || upperHex {
		return 16
	}
	size := 0
	for _, c := range []struct {
		used bool
		n    int
	}{{lower, 26}, {upper, 26}, {digit, 10}, {other, 33}, {wide, 100}} {
		if c.used {
			size += c.n
		}
	}
	return size
}

// predictable reports whether rs[i] follows from what comes before it:
// a repeat, a run, a keyboard neighbour or a stretch seen before.
func predictable(rs []rune, i int) bool {
	prev, r := unicode.ToLower(rs[i-1]), unicode.ToLower(rs[i])
	if d := r - prev; d >= -1 && d <= 1 {
		return true
	}
	for _, row := range keyboardRows {
		if p, q := strings.IndexRune(row, prev), strings.IndexRune(row, r); p >= 0 && q >= 0 && (q-p == 1 || p-q == 1) {
			return true
		}
	}
	if i >= 2 {
		stretch := string(rs[i-2 : i+1])
		if strings.Contains(string(rs[:i]), stretch) {
			return true
		}
	}
	return false
}
