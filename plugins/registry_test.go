package plugins

import (
	"context"
	"slices"
	"testing"

	"github.com/den-project/den/queue"
)

func TestRegistry(t *testing.T) {
	var r Registry
	p := Func(func(context.Context, *queue.Task, Env) (int, error) { return 1, nil })
	r.Register("B::Plugin", p)
	r.Register("A::Plugin", p)
	if got := r.Names(); !slices.Equal(got, []string{"A::Plugin", "B::Plugin"}) {
		t.Fatalf("Names() = %v", got)
	}
	if _, ok := r.Lookup("A::Plugin"); !ok {
		t.Fatal("registered plugin not found")
	}
	if _, ok := r.Lookup("C::Plugin"); ok {
		t.Fatal("unregistered plugin found")
	}
	for name, call := range map[string]func(){
		"duplicate":  func() { r.Register("A::Plugin", p) },
		"empty name": func() { r.Register("", p) },
		"nil plugin": func() { r.Register("N::Plugin", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Register did not panic", name)
				}
			}()
			call()
		}()
	}
}
