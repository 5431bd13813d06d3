package sandbox

import (
	"slices"
	"testing"
)

// The boundary lets a dynamically linked program's loader be executed: the
// kernel opens it for execution along with the program.
func TestLoadersIncludeTheProgramsInterpreter(t *testing.T) {
	interp := interpreter("/usr/bin/env")
	if interp == "" {
		t.Skip("/usr/bin/env is missing or not a dynamically linked ELF file here")
	}
	if got := Loaders("/usr/bin/env"); !slices.Contains(got, interp) {
		t.Fatalf("Loaders = %v, want %s among them", got, interp)
	}
	if interpreter("/etc/hostname") != "" {
		t.Fatal("a text file has an ELF interpreter")
	}
}
