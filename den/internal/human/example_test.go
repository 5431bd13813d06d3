package human_test

import (
	"fmt"

	"github.com/den-project/den/den/internal/human"
)

// Escape makes a string from the database safe for one line of a
// terminal: a queue name that tries to retitle the terminal is printed
// with its escape sequence spelled out, and a tab or newline cannot break
// a table's row.
func ExampleEscape() {
	fmt.Println(human.Escape("resize\x1b]0;pwned\x07"))
	fmt.Println(human.Escape("two\tcolumns\nand a line"))
	fmt.Println(human.Escape("plain é 中"))
	// Output:
	// resize\x1b]0;pwned\a
	// two\tcolumns\nand a line
	// plain é 中
}

// EscapeText is for text of several lines, such as a task's output:
// newlines and tabs stay, while a screen-clearing sequence and a
// right-to-left override are spelled out.
func ExampleEscapeText() {
	fmt.Println(human.EscapeText("step 1\tok\nstep 2\x1b[2J\tok\nfile \u202etxt.exe"))
	// Output:
	// step 1	ok
	// step 2\x1b[2J	ok
	// file \u202etxt.exe
}
